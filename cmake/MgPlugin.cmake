# mg_add_plugin(name SOURCES src... [LIBS lib...]): build one mgrun plugin,
# libmg_<name>.so, as a MODULE library with hidden visibility (only
# mg_plugin_entry is exported), linked against libmg and LIBS (a strategy
# built from the kit adds mgrun::mg_kit). The plugin's kind is what its
# descriptor says. Used in-tree and by third parties after
# find_package(mgrun). In-tree plugins land in MG_BUILD_PLUGIN_DIR and
# install to <libdir>/mgrun/plugins, whose RUNPATH ($ORIGIN/../..) finds
# libmg two folders up.
function(mg_add_plugin name)
  cmake_parse_arguments(P "" "" "SOURCES;LIBS" ${ARGN})
  set(target mg_${name})
  add_library(${target} MODULE ${P_SOURCES})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME "mg_${name}" PREFIX "lib"
    C_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden)
  if(TARGET mg)
    target_link_libraries(${target} PRIVATE mg ${P_LIBS})
    set_target_properties(${target} PROPERTIES
      LIBRARY_OUTPUT_DIRECTORY ${MG_BUILD_PLUGIN_DIR})
    set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN/../..")
    install(TARGETS ${target} LIBRARY DESTINATION ${MG_INSTALL_PLUGIN_DIR})
  else()
    target_link_libraries(${target} PRIVATE mgrun::mg ${P_LIBS})
  endif()
endfunction()

# In-tree: add every subfolder of the current folder that has a
# CMakeLists.txt (one plugin each).
function(mg_add_plugin_dirs)
  file(GLOB dirs LIST_DIRECTORIES true CONFIGURE_DEPENDS
    ${CMAKE_CURRENT_SOURCE_DIR}/*)
  foreach(dir ${dirs})
    if(IS_DIRECTORY ${dir} AND EXISTS ${dir}/CMakeLists.txt)
      add_subdirectory(${dir})
    endif()
  endforeach()
endfunction()
