// A fresh folder under /tmp for one test, removed with everything in it at the end.
#pragma once
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/mg_test_XXXXXX";
    REQUIRE(::mkdtemp(name));
    path = name;
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};
