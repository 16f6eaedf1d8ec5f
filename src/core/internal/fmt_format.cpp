// fmt's compiled part, built once here rather than in every file that formats.
//
// frugal uses the fmt headers that LibTorch's wheel ships (CMakeLists.txt, "fmt"). Header-only
// (FMT_HEADER_ONLY), every translation unit compiled fmt's whole implementation again at -O2,
// about a fifth of a light file's compile time (docs/build.md, "Build time"). This file is fmt's
// own src/format.cc for fmt 12 (the wheel's headers carry no sources): the implementation, and
// the explicit instantiations the headers declare `extern`.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE

#if FMT_USE_LOCALE
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
#endif

namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);

template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
template FMT_API void buffer<wchar_t>::append(const wchar_t*, const wchar_t*);

}  // namespace detail
FMT_END_NAMESPACE
