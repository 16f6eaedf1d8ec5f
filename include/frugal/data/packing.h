// Dynamic batching for variable-length documents: three ways to turn token lists into (x, y)
// rows for next-token training, as pure functions.
//
//   pad_batches     one document piece per row, every row padded to model.block (the naive way)
//   bucket_batches  pieces sorted by length inside windows of batches, each batch padded only to
//                   its longest row; the batch order is then shuffled with a seed
//   pack_batches    documents concatenated with a separator token into one stream, cut into
//                   full rows of model.block positions (only the very last row is padded)
//
// Contracts shared by all three (tests/data/packing_test.cpp proves them):
//   - a document longer than block + 1 tokens is split into pieces of at most block + 1 tokens
//     that overlap by one, so each of its next-token targets appears in exactly one row;
//   - y = kIgnoreIndex wherever there is no target: padding, and (packing) the first token of a
//     document, which is never predicted from the previous document, so the three strategies
//     train on the same targets (packing adds one per document: predicting the separator);
//   - doc[] holds the document index of every x position (-1 for padding), for models that
//     restrict attention to one document (the reference GPT attends across the separator, as
//     GPT-2 does; the masked targets above keep the loss free of cross-document predictions);
//   - deterministic: the same inputs (and seed) give the same batches.
#pragma once

#include <cstdint>
#include <vector>

namespace frugal {

// Targets with this value are ignored by Gpt::loss (it is torch's cross-entropy default).
constexpr int64_t kIgnoreIndex = -100;

// A batch of `rows` rows of `width` positions, row-major.
struct TokenRows {
  int64_t rows = 0;
  int64_t width = 0;         // positions per row (<= block)
  std::vector<int64_t> x;    // inputs; padding positions hold the pad token
  std::vector<int64_t> y;    // next-token targets; kIgnoreIndex = no target
  std::vector<int32_t> doc;  // document index of each x position; -1 = padding
  // Where each row starts: the token offset inside its document (pad, bucket) or inside the
  // packed stream (pack).
  std::vector<int64_t> offset;

  int64_t positions() const { return rows * width; }
  int64_t padding() const;  // x positions that hold padding
  int64_t targets() const;  // y positions that are not kIgnoreIndex
};

struct BatchingStats {
  int64_t batches = 0;
  int64_t positions = 0;  // x positions computed (rows x width, summed)
  int64_t padding = 0;    // of which padding
  int64_t targets = 0;    // positions whose target counts in the loss
  double padding_fraction() const {
    return positions > 0 ? static_cast<double>(padding) / static_cast<double>(positions) : 0.0;
  }
};
BatchingStats batching_stats(const std::vector<TokenRows>& batches);

// REQUIRES for all: block >= 1, batch_rows >= 1. Empty documents are skipped.
std::vector<TokenRows> pad_batches(const std::vector<std::vector<int32_t>>& docs, int64_t block, int64_t batch_rows,
                                   int32_t pad_token);

// Sorts pieces by length inside windows of `window_batches` batches (longer windows: less
// padding, less randomness), pads each batch to its longest row, then shuffles the batch order
// with `seed`.
std::vector<TokenRows> bucket_batches(const std::vector<std::vector<int32_t>>& docs, int64_t block, int64_t batch_rows,
                                      int32_t pad_token, uint64_t seed, int64_t window_batches = 32);

// Every document is followed by `separator` in the stream.
std::vector<TokenRows> pack_batches(const std::vector<std::vector<int32_t>>& docs, int64_t block, int64_t batch_rows,
                                    int32_t separator, int32_t pad_token);

}  // namespace frugal
