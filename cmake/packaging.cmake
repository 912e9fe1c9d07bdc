# Man pages, bash completion, the daemon's systemd unit and config file, the plugstack snippet, Debian's policy
# files, and the Debian packages (docs/install.md). Included at the end of the top CMakeLists.txt, after every
# other install rule.
#
#   cpack --config build/CPackConfig.cmake -G DEB -B OUT
# makes three packages for Debian 12, installed under /usr with /etc for configuration:
#   infrarsi            the commands, the trial wrapper, docs and man pages, bash completion, infrarsid.service
#                       and /etc/default/infrarsid
#   infrarsi-spank      the SPANK plugin, built for one Slurm release (the headers' SLURM_VERSION_NUMBER) and
#                       depending on it; its plugstack snippet in /usr/share/infrarsi/plugstack.conf.d (the
#                       operator enables it; the package does not); infrarsi-spank(8)
#   infrarsi-workloads  the reference workloads: minigpt's source and binary (Open MPI), torchgpt
# Every install() rule names one of these components; no test material is in any (the top CMakeLists.txt).
# Each has /usr/share/doc/<package>/copyright and changelog.Debian.gz. Library dependencies come from
# dpkg-shlibdeps (dpkg-dev); the others are declared below.

# --- Man pages, from --help (help2man), with each infrarsi command's own --help in a COMMANDS section.
find_program(INFRARSI_HELP2MAN help2man)
if(INFRARSI_HELP2MAN)
  find_program(INFRARSI_GZIP gzip)
  set(_man ${CMAKE_BINARY_DIR}/man)
  set(_pages "")
  foreach(prog infrarsi infrarsid)
    if(prog STREQUAL "infrarsi")
      set(name "turn a Slurm training job into a verified faster one")
      set(commands_include ${_man}/infrarsi-commands.h2m)
      set(gen_commands COMMAND ${CMAKE_COMMAND} -DBIN_DIR=$<TARGET_FILE_DIR:infrarsi> -DPROGRAM=infrarsi
                       -DOUT=${commands_include} -P ${CMAKE_SOURCE_DIR}/cmake/help2man-commands.cmake)
      set(include_args --include ${commands_include} --include ${CMAKE_SOURCE_DIR}/cmake/infrarsi.h2m)
    else()
      set(name "the InfraRSI campaign daemon")
      set(gen_commands "")
      set(include_args --include ${CMAKE_SOURCE_DIR}/cmake/infrarsid.h2m)
    endif()
    set(page ${_man}/${prog}.1)
    set(compress "")
    if(INFRARSI_GZIP)
      set(compress COMMAND ${INFRARSI_GZIP} -9nf ${page})
      set(page ${page}.gz)
    endif()
    # Run as plain `infrarsi` from PATH, so the pages say "Usage: infrarsi", not the build tree's path.
    add_custom_command(OUTPUT ${page}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${_man}
      ${gen_commands}
      COMMAND ${CMAKE_COMMAND} -E env "PATH=$<TARGET_FILE_DIR:${prog}>:$ENV{PATH}"
              ${INFRARSI_HELP2MAN} --no-info --section=1 --name=${name} ${include_args} --output=${_man}/${prog}.1 ${prog}
      ${compress}
      DEPENDS ${prog} ${CMAKE_SOURCE_DIR}/cmake/help2man-commands.cmake ${CMAKE_SOURCE_DIR}/cmake/${prog}.h2m
      COMMENT "Generating the man page ${prog}.1 from --help" VERBATIM)
    list(APPEND _pages ${page})
  endforeach()
  add_custom_target(infrarsi_man_pages ALL DEPENDS ${_pages})
  install(FILES ${_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT infrarsi OPTIONAL)
else()
  message(STATUS "help2man not found: no man pages (apt-get install help2man, or scripts/setup)")
endif()

# --- Files written here, not generated from --help: the plugin's man page, Debian's changelog (gzip -9n, as
# Debian policy 12.7 asks: no name or time stamp in the header, so the package is reproducible).
find_program(INFRARSI_GZIP_PROGRAM gzip)
set(_policy ${CMAKE_BINARY_DIR}/deb-policy)
set(INFRARSI_PACKAGE_RELEASE 1 CACHE STRING "The Debian revision of the packages (their Version is VERSION-RELEASE)")
set(INFRARSI_DEB_VERSION "${PROJECT_VERSION}-${INFRARSI_PACKAGE_RELEASE}")
# Who answers for the packages: the Maintainer field and the changelog's signature. The default is this
# project's team address (the one its commits carry); a site that builds its own packages puts its own there
# (-DINFRARSI_PACKAGE_CONTACT="HPC team <hpc@example.org>"), as Debian expects of whoever builds a package.
set(INFRARSI_PACKAGE_CONTACT "InfraRSI maintainers <maintainers@users.noreply.a-seed-f1c88226.example>"
    CACHE STRING "The Debian packages' Maintainer (and the changelog's signature): Name <address>")
if(NOT INFRARSI_PACKAGE_CONTACT MATCHES "^[^<>]+ <[^<>@ ]+@[^<>@ ]+>$")
  message(FATAL_ERROR "INFRARSI_PACKAGE_CONTACT='${INFRARSI_PACKAGE_CONTACT}' is not `Name <address>`")
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/deb/changelog.in ${_policy}/changelog.Debian @ONLY)
set(_spank_page ${CMAKE_SOURCE_DIR}/spank/infrarsi-spank.8)
if(INFRARSI_GZIP_PROGRAM)
  add_custom_command(OUTPUT ${_policy}/changelog.Debian.gz ${_policy}/infrarsi-spank.8.gz
    COMMAND ${INFRARSI_GZIP_PROGRAM} -9nc ${_policy}/changelog.Debian > ${_policy}/changelog.Debian.gz
    COMMAND ${INFRARSI_GZIP_PROGRAM} -9nc ${_spank_page} > ${_policy}/infrarsi-spank.8.gz
    DEPENDS ${_policy}/changelog.Debian ${_spank_page}
    COMMENT "Compressing the Debian changelog and infrarsi-spank.8" VERBATIM)
  add_custom_target(infrarsi_policy_files ALL DEPENDS ${_policy}/changelog.Debian.gz ${_policy}/infrarsi-spank.8.gz)
  set(_changelog ${_policy}/changelog.Debian.gz)
  set(_spank_page ${_policy}/infrarsi-spank.8.gz)
else()
  message(STATUS "gzip not found: the changelog and infrarsi-spank.8 are installed uncompressed")
  set(_changelog ${_policy}/changelog.Debian)
endif()
set(_components infrarsi infrarsi-workloads)
if(INFRARSI_WITH_SPANK)
  list(APPEND _components infrarsi-spank)
  install(FILES ${_spank_page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man8 COMPONENT infrarsi-spank)
endif()
foreach(c IN LISTS _components)
  install(FILES ${CMAKE_SOURCE_DIR}/cmake/deb/copyright ${_changelog} DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${c}
          COMPONENT ${c})
endforeach()

# --- Bash completion (one file for both commands, under each command's name, as bash-completion loads them).
install(FILES etc/bash-completion/infrarsi DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        COMPONENT infrarsi)
install(FILES etc/bash-completion/infrarsi DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME infrarsid COMPONENT infrarsi)

# --- /etc and the systemd unit: where they go depends on the prefix, known at install time only.
install(CODE "set(INFRARSI_SYSTEM_COMPONENT infrarsi)
set(INFRARSI_SYSTEM_SOURCE \"${CMAKE_SOURCE_DIR}\")
include(\"${CMAKE_SOURCE_DIR}/cmake/install-system-files.cmake\")" COMPONENT infrarsi)
if(INFRARSI_WITH_SPANK)
  install(CODE "set(INFRARSI_SYSTEM_COMPONENT infrarsi-spank)
set(INFRARSI_SYSTEM_SOURCE \"${CMAKE_SOURCE_DIR}\")
set(INFRARSI_SYSTEM_PLUGIN_DIR \"${INFRARSI_PLUGIN_DIR}\")
set(INFRARSI_SYSTEM_DATA_DIR \"${INFRARSI_DATA_DESTINATION}\")
include(\"${CMAKE_SOURCE_DIR}/cmake/install-system-files.cmake\")" COMPONENT infrarsi-spank)
endif()

# --- The Debian packages.
if(INFRARSI_PACKAGE_CONTACT MATCHES "a-seed-f1c88226\\.example>$")
  message(STATUS "Packages: Maintainer is the project's address (${INFRARSI_PACKAGE_CONTACT}); packages a site "
                 "builds for itself name the site: -DINFRARSI_PACKAGE_CONTACT=\"Name <address>\"")
endif()
if(INFRARSI_WITH_WORKLOAD AND MINIGPT_NATIVE)
  message(STATUS "Packages: minigpt is built with -march=native (MINIGPT_NATIVE): its package runs on this "
                 "machine's kind of CPU; -DMINIGPT_NATIVE=OFF for packages meant for other machines")
endif()
set(CPACK_PACKAGE_NAME infrarsi)
set(CPACK_PACKAGE_VENDOR "InfraRSI")
set(CPACK_PACKAGE_CONTACT "${INFRARSI_PACKAGE_CONTACT}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_RELEASE ${INFRARSI_PACKAGE_RELEASE}) # Version 0.1.0-1: changelog.Debian.gz, not changelog.gz
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPackDeb would put it before each description's own first line.
set(CPACK_PACKAGING_INSTALL_PREFIX /usr) # the conffiles in cmake/deb name /etc, which this prefix gives
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL ${_components})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # infrarsi_0.1.0-1_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_INFRARSI_PACKAGE_NAME infrarsi)
set(CPACK_DEBIAN_INFRARSI_DESCRIPTION "Slurm-native tuner for distributed LLM training jobs
InfraRSI turns an existing distributed training job on a Slurm cluster into a
verified, faster one: it co-optimizes launch settings and code patches under a
fixed task contract, runs every candidate as a Slurm job-array trial, and
promotes only changes that keep the loss, fit in memory and are faster beyond
noise. This package has the infrarsi command, the infrarsid daemon (with a
systemd unit, not enabled), the trial wrapper, man pages, bash completion and
documentation. The SPANK plugin is in infrarsi-spank, the reference workloads
(minigpt, torchgpt) in infrarsi-workloads.")
# adduser: the postinst's system user; patch: candidate code patches. Trials go to Slurm when it answers
# (else this machine); gnuplot draws the HTML report's plots; git for `apply --git-branch`.
set(CPACK_DEBIAN_INFRARSI_PACKAGE_DEPENDS "adduser, patch")
set(CPACK_DEBIAN_INFRARSI_PACKAGE_RECOMMENDS "slurm-client | slurm-smd-client, gnuplot-nox, git")
set(CPACK_DEBIAN_INFRARSI_PACKAGE_SUGGESTS "infrarsi-spank, infrarsi-workloads")
set(CPACK_DEBIAN_INFRARSI_PACKAGE_CONTROL_EXTRA
    "${CMAKE_SOURCE_DIR}/cmake/deb/infrarsi/conffiles;${CMAKE_SOURCE_DIR}/cmake/deb/infrarsi/postinst;${CMAKE_SOURCE_DIR}/cmake/deb/infrarsi/prerm;${CMAKE_SOURCE_DIR}/cmake/deb/infrarsi/postrm")

set(CPACK_DEBIAN_INFRARSI-WORKLOADS_PACKAGE_NAME infrarsi-workloads)
set(CPACK_DEBIAN_INFRARSI-WORKLOADS_DESCRIPTION "InfraRSI reference workloads (minigpt, torchgpt)
The training jobs InfraRSI's examples and presets tune: minigpt (a dense and
MoE GPT in C++ with MPI; its source, candidate patches and presets under
/usr/share/infrarsi/workloads/minigpt, a built binary in /usr/libexec/infrarsi
and its launcher minigpt.sbatch) and torchgpt (a PyTorch job and its
contract). Campaigns on minigpt build patched copies of its source, with the
build tools this package suggests.")
# The binary's libraries (Open MPI, OpenMP) come from dpkg-shlibdeps; what builds minigpt's patched copies in
# campaign sandboxes, and PyTorch for torchgpt, are suggested: not every site tunes the reference workloads.
set(CPACK_DEBIAN_INFRARSI-WORKLOADS_PACKAGE_DEPENDS "infrarsi (= ${INFRARSI_DEB_VERSION})")
set(CPACK_DEBIAN_INFRARSI-WORKLOADS_PACKAGE_SUGGESTS
    "cmake, g++, make, openmpi-bin, libopenmpi-dev, libeigen3-dev, nlohmann-json3-dev, libcli11-dev, python3-torch")

set(CPACK_DEBIAN_INFRARSI-SPANK_PACKAGE_NAME infrarsi-spank)
# Slurm loads a plugin only into the release (major.minor) whose headers it was built with (spank/CMakeLists.txt):
# the package says which, Provides it by name, and depends on that release of Debian's Slurm or of SchedMD's
# own packages (slurm-smd), the way a site installs either. Debian cannot say (A >= x and A << y) or
# (B >= x and B << y); the two alternatives of each bound say it where one Slurm is installed (SchedMD's
# packages declare conflicts with Debian's: docs/install.md).
set(CPACK_DEBIAN_INFRARSI-SPANK_DESCRIPTION "InfraRSI SPANK plugin for Slurm ${INFRARSI_SLURM_RELEASE} (--infrarsi)
Adds --infrarsi to srun, salloc and sbatch: records each allocation's hwloc
topology and noise in a spool, runs InfraRSI's trial array tasks with their
settings, and files tune requests for the infrarsid daemon. Built against
Slurm ${INFRARSI_SLURM_VERSION}'s headers: it loads into Slurm
${INFRARSI_SLURM_RELEASE}.x only. Installing it does not enable it: link
/usr/share/infrarsi/plugstack.conf.d/infrarsi.conf into
/etc/slurm/plugstack.conf.d/ on every compute node and submit host
(infrarsi-spank(8)).")
set(_slurm_lo "(>= ${INFRARSI_SLURM_RELEASE})")
set(_slurm_hi "(<< ${INFRARSI_SLURM_RELEASE_BOUND})")
set(CPACK_DEBIAN_INFRARSI-SPANK_PACKAGE_DEPENDS
    "infrarsi (= ${INFRARSI_DEB_VERSION}), slurm-wlm-basic-plugins ${_slurm_lo} | slurm-smd ${_slurm_lo}, slurm-wlm-basic-plugins ${_slurm_hi} | slurm-smd ${_slurm_hi}")
set(CPACK_DEBIAN_INFRARSI-SPANK_PACKAGE_PROVIDES "infrarsi-spank-slurm-${INFRARSI_SLURM_RELEASE}")
set(CPACK_DEBIAN_INFRARSI-SPANK_PACKAGE_ENHANCES "slurmd, slurm-client")
include(CPack)
