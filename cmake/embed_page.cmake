# Makes the timeline page's template a C++ string at build time (cmake -P): HTML with the CSS and
# the JavaScript files put in where it says /*MG_STYLE*/ and /*MG_SCRIPT*/, so that the page is one
# self-contained file while its parts stay readable files in report/.
#   -DHTML=timeline.html -DCSS=timeline.css -DJS="a.js|b.js" (in order) -DOUT=timeline_page.cpp
file(READ "${HTML}" page)
file(READ "${CSS}" css)
string(REPLACE "|" ";" js_files "${JS}")
set(js "")
foreach(f IN LISTS js_files)
  file(READ "${f}" part)
  string(APPEND js "${part}")
endforeach()
string(REPLACE "/*MG_STYLE*/" "${css}" page "${page}")
string(REPLACE "/*MG_SCRIPT*/" "${js}" page "${page}")
string(FIND "${page}" ")mgpage\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "the timeline page contains )mgpage\", the end of the raw string that embeds it")
endif()
file(WRITE "${OUT}.tmp" "// Generated from report/timeline.html, .css and .js by cmake/embed_page.cmake: edit those.\n"
  "#include <memgrad/report/timeline_impl.h>\n"
  "const char* const mg::memory::detail::kTimelinePage = R\"mgpage(${page})mgpage\";\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
