#include "supervisor/sandboxes/claude_runtime.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <set>

#include "common/file_util.h"
#include "common/unique_fd.h"

namespace corral::supervisor {
namespace {

constexpr size_t kMaxHeaders = 256;        // program headers of a sane ELF file
constexpr uint64_t kMaxSection = 1 << 20;  // bytes of a dynamic section or string table we read

Status ReadAt(int fd, void* buf, size_t size, uint64_t offset, const std::string& path) {
  ssize_t n = pread(fd, buf, size, static_cast<off_t>(offset));
  if (n < 0) return ErrnoError("read " + path);
  if (static_cast<size_t>(n) != size) return Status::Error(path + ": truncated ELF file", EINVAL);
  return Status();
}

// The file offset of virtual address `vaddr`, from the PT_LOAD segment that holds it.
StatusOr<uint64_t> FileOffset(const std::vector<Elf64_Phdr>& headers, uint64_t vaddr, const std::string& path) {
  for (const Elf64_Phdr& ph : headers) {
    if (ph.p_type == PT_LOAD && vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz) {
      return vaddr - ph.p_vaddr + ph.p_offset;
    }
  }
  return Status::Error(path + ": the dynamic string table is in no loaded segment", EINVAL);
}

// DT_NEEDED of the dynamic section `ph`.
Status ReadNeeded(int fd, const std::vector<Elf64_Phdr>& headers, const Elf64_Phdr& ph, const std::string& path,
                  std::vector<std::string>& needed) {
  if (ph.p_filesz > kMaxSection) return Status::Error(path + ": dynamic section too large", EINVAL);
  std::vector<Elf64_Dyn> dyn(ph.p_filesz / sizeof(Elf64_Dyn));
  RETURN_IF_ERROR(ReadAt(fd, dyn.data(), dyn.size() * sizeof(Elf64_Dyn), ph.p_offset, path));
  uint64_t strtab = 0, strsz = 0;
  std::vector<uint64_t> names;
  for (const Elf64_Dyn& d : dyn) {
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
    if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
    if (d.d_tag == DT_NEEDED) names.push_back(d.d_un.d_val);
  }
  if (names.empty()) return Status();
  if (strtab == 0 || strsz == 0 || strsz > kMaxSection) return Status::Error(path + ": bad string table", EINVAL);
  ASSIGN_OR_RETURN(uint64_t offset, FileOffset(headers, strtab, path));
  std::string strings(strsz, '\0');
  RETURN_IF_ERROR(ReadAt(fd, strings.data(), strsz, offset, path));
  for (uint64_t name : names) {
    if (name >= strsz) return Status::Error(path + ": DT_NEEDED outside the string table", EINVAL);
    needed.emplace_back(strings.c_str() + name);
  }
  return Status();
}

// Writes `content` to `dir`/`name` through a temporary name and a rename.
Status PlaceFile(const std::string& dir, const std::string& name, const std::string& content, int mode) {
  const std::string path = dir + "/" + name;
  const std::string temporary = path + ".new";
  (void)unlink(temporary.c_str());
  RETURN_IF_ERROR(WriteNewFile(temporary, content, mode));
  if (chmod(temporary.c_str(), mode) != 0 || rename(temporary.c_str(), path.c_str()) != 0) {
    Status failed = ErrnoError("place " + path);
    (void)unlink(temporary.c_str());
    return failed;
  }
  return Status();
}

// The host path of library `soname`: the first of `lib_dirs` that has it.
StatusOr<std::string> FindLibrary(const std::string& soname, const std::vector<std::string>& lib_dirs) {
  if (soname.empty() || soname.find('/') != std::string::npos) {
    return Status::Error("a needed library with a path: " + soname, EINVAL);
  }
  for (const std::string& dir : lib_dirs) {
    const std::string candidate = dir + "/" + soname;
    if (access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return Status::Error("library " + soname + " is not in the host's library directories", ENOENT);
}

}  // namespace

StatusOr<ElfNeeds> ReadElfNeeds(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  Elf64_Ehdr eh;
  RETURN_IF_ERROR(ReadAt(fd.get(), &eh, sizeof(eh), 0, path));
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return Status::Error(path + ": not a 64-bit little-endian ELF file", EINVAL);
  }
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > kMaxHeaders) {
    return Status::Error(path + ": unexpected program headers", EINVAL);
  }
  std::vector<Elf64_Phdr> headers(eh.e_phnum);
  RETURN_IF_ERROR(ReadAt(fd.get(), headers.data(), headers.size() * sizeof(Elf64_Phdr), eh.e_phoff, path));
  ElfNeeds needs;
  for (const Elf64_Phdr& ph : headers) {
    if (ph.p_type == PT_INTERP) {
      if (ph.p_filesz == 0 || ph.p_filesz > PATH_MAX) return Status::Error(path + ": bad PT_INTERP", EINVAL);
      std::string interp(ph.p_filesz, '\0');
      RETURN_IF_ERROR(ReadAt(fd.get(), interp.data(), interp.size(), ph.p_offset, path));
      needs.interpreter = interp.c_str();  // up to its NUL
    }
    if (ph.p_type == PT_DYNAMIC) RETURN_IF_ERROR(ReadNeeded(fd.get(), headers, ph, path, needs.needed));
  }
  return needs;
}

StatusOr<ClaudeRuntime> StageClaudeRuntime(const std::string& binary, const std::string& dir,
                                           const std::string& static_bash, const std::vector<std::string>& lib_dirs) {
  ASSIGN_OR_RETURN(ElfNeeds needs, ReadElfNeeds(binary));
  if (needs.interpreter.empty()) return Status::Error(binary + ": no ELF interpreter (not a dynamic executable)", EINVAL);
  // The closure of DT_NEEDED; the interpreter is the loader itself (ld.so), not a library here.
  const std::string loader_name = needs.interpreter.substr(needs.interpreter.rfind('/') + 1);
  std::set<std::string> seen = {loader_name};
  std::vector<std::string> todo = needs.needed;
  std::vector<std::pair<std::string, std::string>> libraries;  // soname, host path
  while (!todo.empty()) {
    const std::string soname = todo.back();
    todo.pop_back();
    if (!seen.insert(soname).second) continue;
    ASSIGN_OR_RETURN(std::string host_path, FindLibrary(soname, lib_dirs));
    ASSIGN_OR_RETURN(ElfNeeds lib, ReadElfNeeds(host_path));
    todo.insert(todo.end(), lib.needed.begin(), lib.needed.end());
    libraries.emplace_back(soname, host_path);
  }
  RETURN_IF_ERROR(MakeDirs(dir + "/lib", 0755));
  for (const std::string& d : {dir, dir + "/lib"}) {
    if (chmod(d.c_str(), 0755) != 0) return ErrnoError("chmod " + d);
  }
  ASSIGN_OR_RETURN(std::string loader, ReadFileToString(needs.interpreter));
  RETURN_IF_ERROR(PlaceFile(dir, "ld.so", loader, 0755));
  for (const auto& [soname, host_path] : libraries) {
    ASSIGN_OR_RETURN(std::string content, ReadFileToString(host_path));
    RETURN_IF_ERROR(PlaceFile(dir + "/lib", soname, content, 0644));
  }
  ClaudeRuntime runtime{dir, binary, false};
  if (!static_bash.empty() && access(static_bash.c_str(), X_OK) == 0) {
    ASSIGN_OR_RETURN(ElfNeeds bash, ReadElfNeeds(static_bash));
    if (!bash.interpreter.empty() || !bash.needed.empty()) {
      return Status::Error(static_bash + " is not a static executable", EINVAL);
    }
    ASSIGN_OR_RETURN(std::string content, ReadFileToString(static_bash));
    RETURN_IF_ERROR(PlaceFile(dir, "bash", content, 0755));
    runtime.has_bash = true;
  } else {
    (void)unlink((dir + "/bash").c_str());
  }
  return runtime;
}

Status StageClaudeExec(const std::string& dir, const std::string& exec) {
  ASSIGN_OR_RETURN(ElfNeeds needs, ReadElfNeeds(exec));
  if (!needs.interpreter.empty() || !needs.needed.empty()) {
    return Status::Error(exec + " is not a static executable", EINVAL);
  }
  ASSIGN_OR_RETURN(std::string content, ReadFileToString(exec));
  RETURN_IF_ERROR(MakeDirs(dir + "/shell", 0755));
  if (chmod((dir + "/shell").c_str(), 0755) != 0) return ErrnoError("chmod " + dir + "/shell");
  RETURN_IF_ERROR(PlaceFile(dir + "/shell", "bash", content, 0755));
  return PlaceFile(dir, "claude", content, 0755);
}

std::vector<std::string> ClaudeLoaderArgv() {
  return {kClaudeLoaderInSandbox, "--inhibit-cache", "--library-path", kClaudeLibDirInSandbox, kClaudeBinaryInSandbox};
}

size_t ClaudeArgsStart(const std::vector<std::string>& argv) {
  if (!argv.empty() && argv[0] == "claude") return 1;
  const std::vector<std::string> head = ClaudeLoaderArgv();
  if (argv.size() >= head.size() && std::equal(head.begin(), head.end(), argv.begin())) return head.size();
  return 0;
}

}  // namespace corral::supervisor
