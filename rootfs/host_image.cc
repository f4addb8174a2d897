#include "rootfs/host_image.h"

namespace corral::rootfs {

std::string GeneratedPasswd() {
  return "root:x:0:0:root:/root:/bin/bash\n"
         "agent:x:1000:1000:corral agent:/home/agent:/bin/bash\n"
         "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
}

std::string GeneratedGroup() {
  return "root:x:0:\n"
         "tty:x:5:\n"
         "agent:x:1000:\n"
         "nogroup:x:65534:\n";
}

std::string GeneratedHosts(const std::string& hostname) {
  return "127.0.0.1\tlocalhost\n"
         "::1\tlocalhost ip6-localhost ip6-loopback\n"
         "127.0.1.1\t" + hostname + "\n";
}

std::string GeneratedNsswitch(bool dns) {
  return std::string("passwd: files\n"
                     "group: files\n"
                     "shadow: files\n") +
         (dns ? "hosts: files dns\n" : "hosts: files\n") +
         "networks: files\n"
         "protocols: files\n"
         "services: files\n";
}

std::string GeneratedResolvConf(const std::vector<std::string>& nameservers) {
  if (nameservers.empty()) return "# corral: this sandbox has no network of its own; names resolve from /etc/hosts.\n";
  std::string text = "# corral: network.dns of corrald's config\n";
  for (const std::string& server : nameservers) text += "nameserver " + server + "\n";
  return text;
}

const std::vector<std::string>& HostImageTrees() {
  static const std::vector<std::string> trees = {"usr",  "bin",   "sbin", "lib",
                                                 "lib32", "lib64", "libx32"};
  return trees;
}

const std::vector<std::string>& HostEtcAllowlist() {
  static const std::vector<std::string> entries = {
      "ld.so.cache", "ld.so.conf",  "ld.so.conf.d", "alternatives", "ssl",
      "ca-certificates", "ca-certificates.conf", "localtime", "timezone", "protocols",
      "services", "mime.types", "bash.bashrc", "profile", "inputrc", "environment",
      "gitconfig", "debian_version", "os-release", "issue", "terminfo", "python3",
      "python3.11", "perl", "magic", "login.defs",
  };
  return entries;
}

}  // namespace corral::rootfs
