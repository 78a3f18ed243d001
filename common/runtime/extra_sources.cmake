# The external runtimes (exec, comfyui) and what they need; included by CMakeLists.txt here.
target_sources(h3pipe_runtime PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/builtin_runtime.cpp
  ${CMAKE_CURRENT_LIST_DIR}/inputs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stage_output.cpp
  ${CMAKE_CURRENT_LIST_DIR}/subprocess.cpp
  ${CMAKE_CURRENT_LIST_DIR}/exec_runtime.cpp
  ${CMAKE_CURRENT_LIST_DIR}/http_client.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comfyui_workflow.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comfyui_client.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comfyui_settings.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comfyui_runtime.cpp
  ${CMAKE_CURRENT_LIST_DIR}/comfyui_progress.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ws_client.cpp
  ${CMAKE_CURRENT_LIST_DIR}/preview.cpp)
# libcurl from Debian (libcurl4-openssl-dev); cmake/H3pipeDeps.cmake finds it at the top level.
if(NOT TARGET CURL::libcurl)
  find_package(CURL REQUIRED)
endif()
target_link_libraries(h3pipe_runtime PUBLIC h3pipe::spec PRIVATE CURL::libcurl h3pipe::model h3pipe::gpu)
