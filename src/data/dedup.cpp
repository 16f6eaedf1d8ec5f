// Exact and MinHash/LSH near-duplicate detection; see dedup.h.
//
// LSH banding: the signature of K MinHashes is cut into b bands of r rows; two documents become
// candidates when any band matches entirely, which for Jaccard similarity s happens with
// probability 1 - (1 - s^r)^b. We choose the largest r (fewest spurious candidates) for which a
// pair right at the threshold is still found with probability >= 99.5%; candidates are then
// confirmed by exact Jaccard, so precision does not depend on the banding.
#include "frugal/data/dedup.h"

#define XXH_INLINE_ALL  // xxHash header-only (third_party/xxhash)
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "frugal/data/rng.h"

namespace frugal {

namespace {

struct Hash128 {
  uint64_t lo, hi;
  bool operator==(const Hash128& o) const { return lo == o.lo && hi == o.hi; }
};
struct Hash128Hasher {
  size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ULL)); }
};

void choose_bands(int k, double threshold, int* bands, int* rows) {
  *rows = 1;
  *bands = k;
  for (int r = 1; r <= k; ++r) {
    const int b = k / r;
    const double p = 1.0 - std::pow(1.0 - std::pow(threshold, r), b);
    if (p >= 0.995) {
      *rows = r;
      *bands = b;
    }
  }
}

// Signature slot i is the minimum over shingles of an independent hash keyed by salts[i].
std::vector<uint64_t> minhash(const std::vector<uint64_t>& shingles, const std::vector<uint64_t>& salts) {
  std::vector<uint64_t> sig(salts.size(), ~uint64_t{0});
  for (uint64_t s : shingles)
    for (size_t i = 0; i < salts.size(); ++i) sig[i] = std::min(sig[i], splitmix64(s ^ salts[i]));
  return sig;
}

}  // namespace

std::string normalize_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool space = false;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isspace(c)) {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(static_cast<char>(std::tolower(c)));
  }
  return out;
}

std::vector<uint64_t> shingle_set(std::string_view text, int shingle_words) {
  const std::string norm = normalize_text(text);
  std::vector<uint64_t> words;
  size_t start = 0;
  while (start < norm.size()) {
    size_t end = norm.find(' ', start);
    if (end == std::string::npos) end = norm.size();
    words.push_back(XXH3_64bits(norm.data() + start, end - start));
    start = end + 1;
  }
  std::vector<uint64_t> out;
  const size_t w = static_cast<size_t>(std::max(1, shingle_words));
  if (words.size() < w) {  // a short document is one shingle of all its words
    if (!words.empty()) out.push_back(XXH3_64bits(words.data(), words.size() * sizeof(uint64_t)));
    return out;
  }
  for (size_t i = 0; i + w <= words.size(); ++i) out.push_back(XXH3_64bits(words.data() + i, w * sizeof(uint64_t)));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  if (a.empty() && b.empty()) return 1.0;
  size_t i = 0, j = 0, common = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j]) {
      ++common;
      ++i;
      ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return static_cast<double>(common) / static_cast<double>(a.size() + b.size() - common);
}

DedupResult deduplicate(const std::vector<std::string>& docs, const DedupOptions& o) {
  DedupResult r;
  r.keep.assign(docs.size(), 1);
  if (o.mode == DedupMode::kNone) return r;
  std::unordered_set<Hash128, Hash128Hasher> seen;
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::string norm = normalize_text(docs[i]);
    const XXH128_hash_t h = XXH3_128bits(norm.data(), norm.size());
    if (!seen.insert({h.low64, h.high64}).second) {
      r.keep[i] = 0;
      ++r.exact_removed;
    }
  }
  if (o.mode != DedupMode::kNear) return r;

  choose_bands(o.num_hashes, o.near_threshold, &r.lsh_bands, &r.lsh_rows);
  std::vector<std::unordered_map<uint64_t, std::vector<size_t>>> buckets(static_cast<size_t>(r.lsh_bands));
  std::vector<std::vector<uint64_t>> shingles(docs.size());
  std::vector<uint64_t> salts(static_cast<size_t>(o.num_hashes));
  for (size_t i = 0; i < salts.size(); ++i) salts[i] = derive_seed(o.seed, i);
  for (size_t i = 0; i < docs.size(); ++i) {
    if (!r.keep[i]) continue;
    shingles[i] = shingle_set(docs[i], o.shingle_words);
    const auto sig = minhash(shingles[i], salts);
    std::vector<uint64_t> keys(static_cast<size_t>(r.lsh_bands));
    for (int b = 0; b < r.lsh_bands; ++b)
      keys[static_cast<size_t>(b)] = XXH3_64bits(sig.data() + b * r.lsh_rows, static_cast<size_t>(r.lsh_rows) * 8);
    bool dup = false;
    std::unordered_set<size_t> tried;
    for (int b = 0; b < r.lsh_bands && !dup; ++b) {
      auto it = buckets[static_cast<size_t>(b)].find(keys[static_cast<size_t>(b)]);
      if (it == buckets[static_cast<size_t>(b)].end()) continue;
      for (size_t j : it->second)
        if (tried.insert(j).second && jaccard(shingles[i], shingles[j]) >= o.near_threshold) {
          dup = true;
          break;
        }
    }
    if (dup) {
      r.keep[i] = 0;
      ++r.near_removed;
      shingles[i].clear();
      continue;
    }
    for (int b = 0; b < r.lsh_bands; ++b) buckets[static_cast<size_t>(b)][keys[static_cast<size_t>(b)]].push_back(i);
  }
  return r;
}

}  // namespace frugal
