# mcubert_export_sources(<export dir> <sources var> <text var>): the C/C++ sources of an export
# (`python -m tflm_mcubert export --out <export dir>`) as its report.json lists them, and whether one of
# them is the on-device tokenizer's vocabulary (model_vocab.cc: the firmware then reads text). The
# export writes report.json last and lists exactly the files it wrote, so a file it did not write (an
# older export's, a stray copy) is never linked.
function(mcubert_export_sources export_dir sources_var text_var)
  set(report "${export_dir}/report.json")
  if(NOT EXISTS "${report}")
    message(FATAL_ERROR "${export_dir} has no report.json: it lists the export's files "
            "(python -m tflm_mcubert export --out ${export_dir})")
  endif()
  file(READ "${report}" report_json)
  # A re-export into the folder configures again at the next build (the list may have changed).
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${report}")
  string(JSON count ERROR_VARIABLE json_error LENGTH "${report_json}" files)
  if(json_error OR count EQUAL 0)
    message(FATAL_ERROR "${report}: no list of the export's files (${json_error}): export again")
  endif()
  set(sources "")
  set(text 0)
  math(EXPR last "${count} - 1")
  foreach(index RANGE ${last})
    string(JSON name GET "${report_json}" files ${index})
    if(name MATCHES "\\.(c|cc|cpp)$")
      list(APPEND sources "${export_dir}/${name}")
    endif()
    if(name STREQUAL "model_vocab.cc")
      set(text 1)
    endif()
  endforeach()
  set(${sources_var} "${sources}" PARENT_SCOPE)
  set(${text_var} ${text} PARENT_SCOPE)
endfunction()
