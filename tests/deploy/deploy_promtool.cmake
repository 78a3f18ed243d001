# promtool check config / check rules / test rules on configs/prometheus (ctest deploy_promtool).
find_program(PROMTOOL promtool PATHS /usr/bin)
if(NOT PROMTOOL)
  message(FATAL_ERROR "promtool not found (Debian package prometheus; scripts/setup.sh installs it)")
endif()
foreach(args
    "check;config;${SRC}/configs/prometheus/prometheus.yml"
    "check;rules;${SRC}/configs/prometheus/alerts.yml"
    "test;rules;${SRC}/tests/deploy/alerts_test.yml")
  execute_process(COMMAND ${PROMTOOL} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "promtool ${args} failed")
  endif()
endforeach()
