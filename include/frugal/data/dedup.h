// Document deduplication for `frugal prepare`.
//
// Exact: two documents are duplicates when their normalised text is equal (ASCII lower-case,
// every run of whitespace collapsed to one space, trimmed); compared by a 128-bit XXH3 hash.
// Near: MinHash signatures over word shingles, candidate pairs from LSH banding, and each
// candidate confirmed by the exact Jaccard similarity of the two shingle sets, so that the
// threshold means what it says (LSH decides only which pairs are compared). A document is
// dropped when it duplicates an EARLIER kept document; the first occurrence always stays.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace frugal {

enum class DedupMode { kNone, kExact, kNear };  // kNear runs the exact pass first

struct DedupOptions {
  DedupMode mode = DedupMode::kNone;
  double near_threshold = 0.8;  // Jaccard similarity of word-shingle sets at or above which two
                                // documents are near-duplicates
  int shingle_words = 5;        // words per shingle; smaller finds looser matches
  int num_hashes = 128;         // MinHash signature length; more = sharper LSH, slower
  uint64_t seed = 0x5eed;
};

struct DedupResult {
  std::vector<uint8_t> keep;  // 1 = keep document i
  int64_t exact_removed = 0;
  int64_t near_removed = 0;
  int lsh_bands = 0, lsh_rows = 0;  // the banding chosen for the threshold
};

std::string normalize_text(std::string_view text);

// Sorted, unique 64-bit hashes of the document's word shingles (of its normalised text).
std::vector<uint64_t> shingle_set(std::string_view text, int shingle_words);
double jaccard(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b);

DedupResult deduplicate(const std::vector<std::string>& docs, const DedupOptions& options);

}  // namespace frugal
