// Opening a page in a real browser: Debian's chromium, headless, printing the page's DOM once its
// scripts have run (--dump-dom). The timeline page's test hook (#selftest=..., timeline_main.js)
// hovers and clicks as a user would; the DOM then holds the tooltip and the breakdown it showed.
#pragma once
#include <map>
#include <string>

namespace browser {

// The browser to run: $MG_CHROMIUM, else the first of chromium, chromium-browser,
// chromium-headless-shell, google-chrome on the PATH; "" when there is none.
std::string find_chromium();

struct Page {
  std::string dom;  // the DOM after the page's scripts ran
  double seconds;   // the browser's wall time, start to exit
};
// Loads file `path` with `hash` appended ("#selftest=..."), in a window of 1400 x 1000.
Page open(const std::string& path, const std::string& hash = "");

// The attributes of the first element whose opening tag contains `marker` (e.g. id="tooltip"),
// with &amp; &lt; &gt; &quot; decoded.
std::map<std::string, std::string> attributes(const std::string& dom, const std::string& marker);
// The text between the first occurrence of `from` and the next `to` after it, tags removed.
std::string text_between(const std::string& dom, const std::string& from, const std::string& to);

}  // namespace browser
