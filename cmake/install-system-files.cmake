# Run at install time (install(CODE) in cmake/packaging.cmake includes it), for one component:
#   INFRARSI_SYSTEM_COMPONENT  infrarsi (the daemon's config file and systemd unit) or infrarsi-spank (the
#                              plugstack snippet)
#   INFRARSI_SYSTEM_SOURCE     the source tree
#   INFRARSI_SYSTEM_PLUGIN_DIR where the plugin is installed (INFRARSI_PLUGIN_DIR: relative to the prefix)
#   INFRARSI_SYSTEM_DATA_DIR   the read-only data directory (share/infrarsi: relative to the prefix)
# Where they go depends on the prefix, known only now: the prefix /usr (the Debian packages, whose
# CPACK_PACKAGING_INSTALL_PREFIX it is) puts the config file in /etc and the unit in /lib/systemd/system, as
# GNUInstallDirs does; any other prefix P (cmake --install --prefix P) in P/etc and P/lib/systemd/system. The
# plugstack snippet goes to P/share/infrarsi/plugstack.conf.d, never /etc: installing it does not enable the
# plugin; the operator links or copies it into Slurm's plugstack.conf.d (docs/install.md). Each file names the
# installed paths of this prefix (the plugin, infrarsid, the config file).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(_etc /etc)
  set(_unit_dir /lib/systemd/system)
else()
  set(_etc "${CMAKE_INSTALL_PREFIX}/etc")
  set(_unit_dir "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
endif()

function(_infrarsi_write dest content)
  set(path "$ENV{DESTDIR}${dest}")
  message(STATUS "Installing: ${path}")
  get_filename_component(dir "${path}" DIRECTORY)
  file(MAKE_DIRECTORY "${dir}")
  file(WRITE "${path}" "${content}")
  file(CHMOD "${path}" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${path}")
  set(CMAKE_INSTALL_MANIFEST_FILES "${CMAKE_INSTALL_MANIFEST_FILES}" PARENT_SCOPE)
endfunction()

if(INFRARSI_SYSTEM_COMPONENT STREQUAL "infrarsi")
  file(READ "${INFRARSI_SYSTEM_SOURCE}/etc/default/infrarsid" _config)
  _infrarsi_write("${_etc}/default/infrarsid" "${_config}")
  file(READ "${INFRARSI_SYSTEM_SOURCE}/etc/systemd/infrarsid.service" _unit)
  string(REPLACE "/usr/bin/infrarsid" "${CMAKE_INSTALL_PREFIX}/bin/infrarsid" _unit "${_unit}")
  string(REPLACE "/etc/default/infrarsid" "${_etc}/default/infrarsid" _unit "${_unit}")
  _infrarsi_write("${_unit_dir}/infrarsid.service" "${_unit}")
elseif(INFRARSI_SYSTEM_COMPONENT STREQUAL "infrarsi-spank")
  if(IS_ABSOLUTE "${INFRARSI_SYSTEM_PLUGIN_DIR}")
    set(_plugin "${INFRARSI_SYSTEM_PLUGIN_DIR}/infrarsi.so")
  else()
    set(_plugin "${CMAKE_INSTALL_PREFIX}/${INFRARSI_SYSTEM_PLUGIN_DIR}/infrarsi.so")
  endif()
  file(READ "${INFRARSI_SYSTEM_SOURCE}/etc/plugstack.conf.d/infrarsi.conf" _snippet)
  string(REGEX REPLACE "\n(required|optional) [^ \n]*/infrarsi\\.so" "\n\\1 ${_plugin}" _snippet "${_snippet}")
  string(FIND "${_snippet}" " ${_plugin} " _at)
  if(_at EQUAL -1)
    message(FATAL_ERROR "etc/plugstack.conf.d/infrarsi.conf has no `required|optional .../infrarsi.so` line")
  endif()
  _infrarsi_write("${CMAKE_INSTALL_PREFIX}/${INFRARSI_SYSTEM_DATA_DIR}/plugstack.conf.d/infrarsi.conf" "${_snippet}")
endif()
