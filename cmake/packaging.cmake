# Man pages, bash completion, the daemon's systemd unit and config file, the plugstack snippet, and the Debian
# packages (docs/install.md). Included at the end of the top CMakeLists.txt, after every other install rule.
#
#   cpack --config build/CPackConfig.cmake -G DEB -B OUT
# makes two packages for Debian 12, installed under /usr with /etc for configuration:
#   infrarsi        the commands, the trial wrapper, docs and man pages, the reference workloads (minigpt's
#                   source and binary, torchgpt), bash completion, infrarsid.service and /etc/default/infrarsid
#   infrarsi-spank  the SPANK plugin and /etc/slurm/plugstack.conf.d/infrarsi.conf naming it
# Every install() rule names one of these components. Library dependencies come from dpkg-shlibdeps
# (dpkg-dev); the others are declared below.

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
include(\"${CMAKE_SOURCE_DIR}/cmake/install-system-files.cmake\")" COMPONENT infrarsi-spank)
endif()

# --- The Debian packages.
set(INFRARSI_PACKAGE_CONTACT "InfraRSI maintainers <maintainers@users.noreply.a-seed-f1c88226.example>"
    CACHE STRING "The Debian packages' Maintainer")
if(INFRARSI_WITH_WORKLOAD AND MINIGPT_NATIVE)
  message(STATUS "Packages: minigpt is built with -march=native (MINIGPT_NATIVE): its package runs on this "
                 "machine's kind of CPU; -DMINIGPT_NATIVE=OFF for packages meant for other machines")
endif()
set(CPACK_PACKAGE_NAME infrarsi)
set(CPACK_PACKAGE_VENDOR "InfraRSI")
set(CPACK_PACKAGE_CONTACT "${INFRARSI_PACKAGE_CONTACT}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPackDeb would put it before each description's own first line.
set(CPACK_PACKAGING_INSTALL_PREFIX /usr) # the conffiles in cmake/deb name /etc, which this prefix gives
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL infrarsi)
if(INFRARSI_WITH_SPANK)
  list(APPEND CPACK_COMPONENTS_ALL infrarsi-spank)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # infrarsi_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_INFRARSI_PACKAGE_NAME infrarsi)
set(CPACK_DEBIAN_INFRARSI_DESCRIPTION "Slurm-native tuner for distributed LLM training jobs
InfraRSI turns an existing distributed training job on a Slurm cluster into a verified, faster one: it
co-optimizes launch settings and code patches under a fixed task contract, runs every candidate as a Slurm
job-array trial, and promotes only changes that keep the loss, fit in memory and are faster beyond noise.
This package has the infrarsi command, the infrarsid daemon (with a systemd unit, not enabled), the trial
wrapper, the reference workloads (minigpt, torchgpt), man pages, bash completion and documentation.")
# adduser: the postinst's system user; patch: candidate code patches. Trials go to Slurm when it answers
# (else this machine); gnuplot draws the HTML report's plots; git for `apply --git-branch`. The rest build
# the minigpt reference workload's patched copies in campaign sandboxes.
set(CPACK_DEBIAN_INFRARSI_PACKAGE_DEPENDS "adduser, patch")
set(CPACK_DEBIAN_INFRARSI_PACKAGE_RECOMMENDS "slurm-client, gnuplot-nox, git")
set(CPACK_DEBIAN_INFRARSI_PACKAGE_SUGGESTS
    "infrarsi-spank, cmake, g++, make, openmpi-bin, libopenmpi-dev, libeigen3-dev, nlohmann-json3-dev, libcli11-dev")
set(CPACK_DEBIAN_INFRARSI_PACKAGE_CONTROL_EXTRA
    "${CMAKE_SOURCE_DIR}/cmake/deb/infrarsi/conffiles;${CMAKE_SOURCE_DIR}/cmake/deb/infrarsi/postinst;${CMAKE_SOURCE_DIR}/cmake/deb/infrarsi/prerm;${CMAKE_SOURCE_DIR}/cmake/deb/infrarsi/postrm")

set(CPACK_DEBIAN_INFRARSI-SPANK_PACKAGE_NAME infrarsi-spank)
set(CPACK_DEBIAN_INFRARSI-SPANK_DESCRIPTION "InfraRSI SPANK plugin for Slurm (--infrarsi)
Adds --infrarsi to srun, salloc and sbatch: records each allocation's hwloc topology and noise in a spool,
runs InfraRSI's trial array tasks with their settings, and files tune requests for the infrarsid daemon.
Enabled by /etc/slurm/plugstack.conf.d/infrarsi.conf, which Debian's /etc/slurm/plugstack.conf includes;
install it on every compute node and submit host.")
# slurm-wlm-basic-plugins: Slurm's plugin directory, and the plugstack.conf that includes plugstack.conf.d.
set(CPACK_DEBIAN_INFRARSI-SPANK_PACKAGE_DEPENDS "infrarsi (= ${PROJECT_VERSION}), slurm-wlm-basic-plugins")
set(CPACK_DEBIAN_INFRARSI-SPANK_PACKAGE_ENHANCES "slurmd, slurm-client")
set(CPACK_DEBIAN_INFRARSI-SPANK_PACKAGE_CONTROL_EXTRA "${CMAKE_SOURCE_DIR}/cmake/deb/infrarsi-spank/conffiles")
include(CPack)
