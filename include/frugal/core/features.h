// The optional parts of a frugal build. Each needs a system library that a bare GPU node may lack;
// CMake switches a feature off, and says so, when its library is absent at configure time
// (FRUGAL_WITH_<NAME> = AUTO, the default; ON makes it required, OFF leaves it out). Everything
// else frugal needs is LibTorch or comes with the source tree (third_party/).
//
// Code that needs a feature calls require_feature() before it starts work, so a build without
// the library refuses with a message naming the feature, the library and the way out, instead of
// failing half-way (or not compiling at all).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace frugal {

struct Feature {
  std::string name;     // "zstd", "libarchive", "images", "sentencepiece", "parquet", "tensorboard"
  bool compiled;        // in this build
  std::string library;  // what it needs: "libzstd"
  std::string enables;  // what it is for, for `frugal doctor`
  std::string package;  // the Debian package that provides the library at build time
};

// Every optional feature, in a fixed order.
const std::vector<Feature>& build_features();

// Whether `name` (one of build_features()'s names) was compiled in. Throws std::logic_error for an
// unknown name (a typo in frugal's own code).
bool have_feature(std::string_view name);

// Throws ConfigError when `name` is not compiled in:
//   "<what> needs <library>, which this frugal was built without (CMake did not find it). Install
//    <package> and rebuild (cmake -DFRUGAL_WITH_<NAME>=ON makes it required)."
void require_feature(std::string_view name, std::string_view what);

// The file of the shared library this program's std::filesystem calls resolve to (the definition
// of std::filesystem::status the dynamic linker picked). It should be libstdc++: the official
// LibTorch wheel's libtorch_cpu.so exports its own build of std::filesystem, which wins where it
// is looked up first (the build links libstdc++ ahead of it; CMakeLists.txt). `frugal doctor`
// reports it and warns otherwise. "" when it cannot be told.
std::string std_filesystem_library();

}  // namespace frugal
