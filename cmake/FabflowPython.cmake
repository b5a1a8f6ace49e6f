# The Python module (_fabflow) and the fabflow package around it, laid out in
# build/python/fabflow/ where `PYTHONPATH=build/python python3 -c "import fabflow"` finds them
# (docs/python.md). Built when pybind11 and Python's headers are there (Debian: pybind11-dev,
# python3-dev; scripts/setup.sh installs them); otherwise the tree has no Python module and
# says so. The module links the static library (position-independent objects).
# `pip install ./python` builds the same sources through python/CMakeLists.txt instead.
find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
find_package(pybind11 CONFIG QUIET)
if(NOT pybind11_FOUND OR NOT Python3_FOUND)
  message(STATUS "fabflow: no pybind11 or Python headers: the Python module is not built")
  return()
endif()
file(GLOB FABFLOW_PYTHON_MODULE_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/src/*.cc)
pybind11_add_module(fabflow_python MODULE NO_EXTRAS ${FABFLOW_PYTHON_MODULE_SOURCES})
target_link_libraries(fabflow_python PRIVATE fabflow)
target_compile_options(fabflow_python PRIVATE ${FABFLOW_WARNINGS})
set_target_properties(fabflow_python PROPERTIES OUTPUT_NAME _fabflow
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/python/fabflow)
file(GLOB FABFLOW_PYTHON_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/fabflow/*.py
  ${PROJECT_SOURCE_DIR}/python/fabflow/*.pyi ${PROJECT_SOURCE_DIR}/python/fabflow/py.typed)
foreach(f ${FABFLOW_PYTHON_SOURCES})
  get_filename_component(name ${f} NAME)
  add_custom_command(TARGET fabflow_python POST_BUILD
    COMMAND ${CMAKE_COMMAND} -E copy_if_different ${f} ${PROJECT_BINARY_DIR}/python/fabflow/${name})
endforeach()
