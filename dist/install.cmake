# What `cmake --install` puts where (DESTDIR=... for a staging root), and the Debian package that
# CPack builds from the same rules (`cpack --config <build>/CPackConfig.cmake`, or dist/package.sh).
#
#   <bindir>/corrald, <bindir>/corral                 /usr/bin
#   <libexecdir>/corral/corral-init, corral-mcp,      /usr/libexec/corral (static: they run in sandboxes;
#     corral-claude, corral-cli                      corral-cli is the full client `corral` runs)
#   <datadir>/corral/web/                             /usr/share/corral/web (when the page was built)
#   <sysconfdir>/corral/corrald.toml                  /etc/corral, every key commented with its default
#   corrald.service                                   systemd's unit directory (/lib/systemd/system)
#   <docdir>/README.md, examples/ (Prometheus, Grafana) /usr/share/doc/corral
#
# The state directory (/var/lib/corral, 0700) and the `corral` group (daemon.admin_group) are made
# by the package's postinst (dist/debian/); corrald makes its state_dir itself where there is none.

install(TARGETS corrald corral RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS corral-init corral-mcp corral-claude corral-cli RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/corral)
install(DIRECTORY ${CMAKE_BINARY_DIR}/tools/web/ DESTINATION ${CMAKE_INSTALL_DATADIR}/corral/web OPTIONAL)
# Absolute: with prefix /usr, GNUInstallDirs puts sysconfdir at /etc (its relative form would be
# /usr/etc).
install(FILES ${PROJECT_SOURCE_DIR}/dist/corrald.toml DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/corral
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
# Samples for monitoring: a Prometheus scrape config and a Grafana dashboard of corrald's metrics.
install(FILES ${PROJECT_SOURCE_DIR}/dist/prometheus.yml ${PROJECT_SOURCE_DIR}/dist/grafana-dashboard.json
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# The unit names the installed corrald and config, wherever the prefix put them.
set(CORRAL_SYSTEMD_UNIT_DIR "" CACHE PATH
    "Where corrald.service goes (default: systemd's unit directory for prefix /usr, else <prefix>/lib/systemd/system)")
set(corral_unit_dir ${CORRAL_SYSTEMD_UNIT_DIR})
if(NOT corral_unit_dir)
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    pkg_get_variable(corral_unit_dir systemd systemdsystemunitdir)
    if(NOT corral_unit_dir)
      set(corral_unit_dir /lib/systemd/system)
    endif()
  else()
    set(corral_unit_dir ${CMAKE_INSTALL_PREFIX}/lib/systemd/system)
  endif()
endif()
file(READ ${PROJECT_SOURCE_DIR}/dist/corrald.service corral_unit)
string(REPLACE "/usr/bin/corrald" "${CMAKE_INSTALL_FULL_BINDIR}/corrald" corral_unit "${corral_unit}")
string(REPLACE "/etc/corral/corrald.toml" "${CORRAL_CONFIG_FILE}" corral_unit "${corral_unit}")
file(WRITE ${CMAKE_BINARY_DIR}/dist/corrald.service "${corral_unit}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/dist/corrald.service)
install(FILES ${CMAKE_BINARY_DIR}/dist/corrald.service DESTINATION ${corral_unit_dir})

# ---- Debian package (CPack DEB) ------------------------------------------------------------------
# The version grows with every commit, so that a newer build upgrades an older one in place:
# <project version>+<commits>.g<hash>, or the project version alone outside a git checkout.
set(corral_package_version ${PROJECT_VERSION})
find_program(GIT_EXECUTABLE git)
if(GIT_EXECUTABLE AND EXISTS ${PROJECT_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-list --count HEAD WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE corral_commits OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=8 HEAD WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE corral_hash OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(corral_commits AND corral_hash)
    set(corral_package_version "${PROJECT_VERSION}+${corral_commits}.g${corral_hash}")
  endif()
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME corral)
set(CPACK_PACKAGE_VERSION ${corral_package_version})
set(CPACK_PACKAGE_CONTACT "corral developers <dev@corral.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "sandbox supervisor for AI coding agents (corrald and the corral CLI)")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "corrald runs a persistent, isolated sandbox per user on one Linux host, built from\n\
namespaces, cgroups (v2 and v1), seccomp, capabilities and an overlayfs root, and Claude Code\n\
agent sessions inside them behind a metering model relay. HTTP and WebSocket API with HS256\n\
tokens; state in SQLite. corral is its command-line client and admin tool.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
# Libraries from dpkg-shlibdeps; programs: mkfs.ext4 (sandbox disks), groupadd (postinst),
# systemd (the unit: Type=notify, Delegate=) and /bin/kill (its ExecReload; minbase lacks it).
# git serves the git routes and execute; Claude Code comes from npm.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "e2fsprogs, passwd, procps, systemd (>= 247)")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "git")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/dist/debian/conffiles ${PROJECT_SOURCE_DIR}/dist/debian/postinst
    ${PROJECT_SOURCE_DIR}/dist/debian/prerm ${PROJECT_SOURCE_DIR}/dist/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
set(CPACK_OUTPUT_FILE_PREFIX ${CMAKE_BINARY_DIR}/package)
include(CPack)
