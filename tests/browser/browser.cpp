#include "browser.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <stdexcept>
#include <vector>

namespace browser {

namespace {

bool on_path(const std::string& name, std::string& found) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t at = 0;
  while (at <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::string candidate = dirs.substr(at, end - at) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return found = candidate, true;
    at = end + 1;
  }
  return false;
}

std::string decode(std::string s) {
  const std::pair<const char*, const char*> entities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}, {"&amp;", "&"}};
  for (auto& [from, to] : entities)
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + 1)) s.replace(at, strlen(from), to);
  return s;
}

}  // namespace

std::string find_chromium() {
  if (const char* env = std::getenv("MG_CHROMIUM")) return env;
  std::string found;
  for (const char* name : {"chromium", "chromium-browser", "chromium-headless-shell", "google-chrome"})
    if (on_path(name, found)) return found;
  return "";
}

Page open(const std::string& path, const std::string& hash) {
  char profile[] = "/tmp/memgrad_chromium_XXXXXX";  // its own profile: tests may run side by side
  if (!::mkdtemp(profile)) throw std::runtime_error("browser: cannot make a profile folder");
  // --no-sandbox: CI runs as root, where chromium's sandbox refuses to start; --disable-dev-shm-usage:
  // containers often have a /dev/shm too small for it.
  const std::string flags =
      "--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars --window-size=1400,1000";
  const std::string command = "timeout 120 '" + find_chromium() + "' " + flags + " --user-data-dir=" + profile +
                              " --dump-dom 'file://" + path + hash + "' 2>/dev/null";
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) throw std::runtime_error("browser: cannot run " + command);
  Page page;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) page.dom.append(buf, n);
  const int status = ::pclose(p);
  page.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::filesystem::remove_all(profile);
  if (status != 0) throw std::runtime_error("browser: `" + command + "` exited with status " + std::to_string(status));
  return page;
}

std::map<std::string, std::string> attributes(const std::string& dom, const std::string& marker) {
  std::map<std::string, std::string> r;
  const size_t at = dom.find(marker);
  if (at == std::string::npos) return r;
  const size_t open = dom.rfind('<', at), close = dom.find('>', at);
  const std::string tag = dom.substr(open, close - open);
  static const std::regex attr(R"re(([\w-]+)="([^"]*)")re");
  for (std::sregex_iterator it(tag.begin(), tag.end(), attr), end; it != end; ++it) r[(*it)[1]] = decode((*it)[2]);
  return r;
}

std::string text_between(const std::string& dom, const std::string& from, const std::string& to) {
  const size_t a = dom.find(from);
  if (a == std::string::npos) return "";
  const size_t b = dom.find(to, a + from.size());
  static const std::regex tags("<[^>]*>");
  return decode(std::regex_replace(dom.substr(a, b == std::string::npos ? std::string::npos : b - a), tags, " "));
}

}  // namespace browser
