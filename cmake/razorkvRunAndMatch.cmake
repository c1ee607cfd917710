# Runs a program and passes only when it exits 0 AND its output matches a regular expression
# (CTest's PASS_REGULAR_EXPRESSION alone ignores the exit code). Used by the example smoke tests:
#   cmake -DCOMMAND="prog;arg1;arg2" -DEXPECT="regex" -P razorkvRunAndMatch.cmake
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE _result OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message("${_out}${_err}")
if(NOT _result EQUAL 0)
  message(FATAL_ERROR "exit status ${_result} (expected 0) from: ${COMMAND}")
endif()
if(NOT "${_out}${_err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not match \"${EXPECT}\"")
endif()
