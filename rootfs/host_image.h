// The built-in `host` image: the host's /usr, /bin, /lib*, /sbin read-only, and a generated /etc.
//
// The host's /etc is never bound wholesale: /etc/shadow, ssh host keys, sudoers, machine-id and
// the like stay out. The generated /etc holds passwd, group, hosts, hostname, resolv.conf and
// nsswitch.conf, plus copies or read-only binds of an allowlist of harmless host files that
// programs need (the dynamic linker's cache, CA certificates, alternatives, time zone).
#pragma once

#include <string>
#include <vector>

namespace corral::rootfs {

// /etc/passwd and /etc/group inside: root (0) and agent (1000), plus nobody/nogroup.
std::string GeneratedPasswd();
std::string GeneratedGroup();
std::string GeneratedHosts(const std::string& hostname);
// With nameservers (a full-network sandbox): hosts from files, then DNS; else files only.
std::string GeneratedNsswitch(bool dns = false);
std::string GeneratedResolvConf(const std::vector<std::string>& nameservers = {});

// Top-level host trees of the image, bound read-only when they are directories and recreated as
// the same symlink when they are symlinks (Debian's merged /usr).
const std::vector<std::string>& HostImageTrees();

// Host /etc entries the image carries (relative to /etc): files are copied, directories bound
// read-only, symlinks recreated. Missing entries are skipped.
const std::vector<std::string>& HostEtcAllowlist();

}  // namespace corral::rootfs
