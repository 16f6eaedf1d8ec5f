// Class ids of the labels of a record dataset; see class_ids in csv_table.h (docs/data.md, "Labels").
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <string_view>

#include "frugal/core/errors.h"
#include "frugal/data/csv_table.h"

namespace frugal {

namespace {

// Labels above this many classes must use at least half of the ids 0 ... max.
constexpr int64_t kDenseClassesUpTo = 1024;
constexpr int64_t kMaxClassId = int64_t{1} << 24;

enum class LabelKind { kInteger, kFraction, kName };

// What a label is; for an integer (or a whole number such as "1.0") its value in *id.
LabelKind label_kind(std::string_view s, int64_t* id) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return LabelKind::kName;
  const char* end = s.data() + s.size();
  auto r = std::from_chars(s.data(), end, *id);
  if (r.ec == std::errc() && r.ptr == end) return LabelKind::kInteger;
  double v = 0;
  r = std::from_chars(s.data(), end, v);
  if (r.ec != std::errc() || r.ptr != end || !std::isfinite(v)) return LabelKind::kName;
  if (v != std::floor(v)) return LabelKind::kFraction;
  const double limit = 9.0e18;  // below 2^63: the cast is exact enough, and far past kMaxClassId
  *id = v >= limit    ? std::numeric_limits<int64_t>::max()
        : v <= -limit ? std::numeric_limits<int64_t>::min()
                      : static_cast<int64_t>(v);
  return LabelKind::kInteger;
}

// A column that mixes integers, fractions and names: refused naming the label at odds with the most.
[[noreturn]] void refuse_mixed(const std::vector<std::string>& labels, const std::vector<LabelKind>& kinds,
                               const std::string& what, const LabelOrigin& where) {
  const auto count = [&](LabelKind k) { return std::count(kinds.begin(), kinds.end(), k); };
  const auto first = [&](auto pred) {
    return static_cast<size_t>(std::find_if(kinds.begin(), kinds.end(), pred) - kinds.begin());
  };
  const auto integers = count(LabelKind::kInteger), names = count(LabelKind::kName);
  const auto numbers = static_cast<int64_t>(kinds.size()) - names, n = static_cast<int64_t>(kinds.size());
  if (names > 0 && names >= numbers) {
    const size_t i = first([](LabelKind k) { return k != LabelKind::kName; });
    throw DataError(fmt::format(
        "{}: label '{}' is a number, but {} of the {} labels of {} are names: one column cannot mix class names "
        "with numbers; fix the label, or make every label a name (e.g. 'c{}') to have them numbered in sorted order",
        where(i), labels[i], names, n, what, labels[i]));
  }
  if (names > 0) {
    const size_t i = first([](LabelKind k) { return k == LabelKind::kName; });
    throw DataError(
        fmt::format("{}: label '{}' is not a number, but {} of the {} labels of {} are: numeric labels are the "
                    "class ids 0, 1, ...; fix the label (or drop the row), or make every label a name",
                    where(i), labels[i], numbers, n, what));
  }
  const size_t i = first([](LabelKind k) { return k == LabelKind::kFraction; });
  throw DataError(fmt::format(
      "{}: label '{}' is not a whole number ({} of the {} labels of {} are): labels are classes, the integer class "
      "ids 0, 1, ... or class names, not regression targets; fix the label (or drop the row)",
      where(i), labels[i], integers, n, what));
}

// Integer labels as the class ids: refused when negative, too large or sparse.
ClassIds integer_ids(std::vector<int64_t> ids, const std::string& what, const LabelOrigin& where) {
  const auto low = std::min_element(ids.begin(), ids.end());
  if (*low < 0)
    throw DataError(
        fmt::format("{}: label {} is negative: integer labels of {} are the class ids 0, 1, ..., N-1; remap the "
                    "labels (e.g. -1 -> 0 where -1 marks the negative class), or make every label a name",
                    where(static_cast<size_t>(low - ids.begin())), *low, what));
  const auto high = std::max_element(ids.begin(), ids.end());
  const int64_t top = *high;
  const std::string at = where(static_cast<size_t>(high - ids.begin()));
  if (top >= kMaxClassId)
    throw DataError(
        fmt::format("{}: label {} of {} is too large: integer labels are the class ids, and a dataset has at most 2^24 "
                    "classes; remap the labels to 0 ... N-1, or make every label a name (e.g. 'c{}')",
                    at, top, what, top));
  std::vector<bool> seen(static_cast<size_t>(top) + 1, false);
  for (int64_t id : ids) seen[static_cast<size_t>(id)] = true;
  const auto distinct = std::count(seen.begin(), seen.end(), true);
  if (top + 1 > kDenseClassesUpTo && 2 * distinct < top + 1)
    throw DataError(fmt::format(
        "the largest label of {} is {} ({}), but only {} distinct labels occur: integer labels are the class "
        "ids, so this would make {} classes, {} of them never seen (more than {} classes need at least half of "
        "the ids in use); remap the labels to 0 ... {}, or make every label a name (e.g. 'c{}') to have them "
        "numbered in sorted order",
        what, top, at, distinct, top + 1, top + 1 - distinct, kDenseClassesUpTo, distinct - 1, top));
  ClassIds c;
  for (int64_t k = 0; k <= top; ++k) c.classes.push_back(std::to_string(k));
  c.ids = std::move(ids);
  return c;
}

}  // namespace

ClassIds class_ids(const std::vector<std::string>& labels, const std::string& what, const LabelOrigin& where) {
  std::vector<LabelKind> kinds(labels.size());
  std::vector<int64_t> ids(labels.size(), 0);
  for (size_t i = 0; i < labels.size(); ++i) kinds[i] = label_kind(labels[i], &ids[i]);
  const auto integers = std::count(kinds.begin(), kinds.end(), LabelKind::kInteger);
  const auto names = std::count(kinds.begin(), kinds.end(), LabelKind::kName);
  if (!labels.empty() && integers == static_cast<std::ptrdiff_t>(labels.size()))
    return integer_ids(std::move(ids), what, where);
  if (names != static_cast<std::ptrdiff_t>(labels.size())) refuse_mixed(labels, kinds, what, where);
  ClassIds c;
  std::map<std::string, int64_t> named;
  for (const auto& l : labels) named.emplace(l, 0);
  for (auto& [name, id] : named) {
    id = static_cast<int64_t>(c.classes.size());
    c.classes.push_back(name);
  }
  c.ids.reserve(labels.size());
  for (const auto& l : labels) c.ids.push_back(named.at(l));
  return c;
}

void set_class_labels(CsvTable* t, const std::vector<std::string>& raw_labels, const LabelOrigin& where) {
  ClassIds c = class_ids(raw_labels, fmt::format("label column '{}'", t->label_column), where);
  t->labels = std::move(c.ids);
  t->classes = std::move(c.classes);
}

}  // namespace frugal
