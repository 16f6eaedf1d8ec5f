// Padding, length bucketing and sequence packing; see packing.h.
#include "frugal/data/packing.h"

#include <algorithm>
#include <random>

namespace frugal {
namespace {

// A slice docs[doc][offset, offset + len) of at most block + 1 tokens.
struct Piece {
  int32_t doc;
  int64_t offset;
  int64_t len;
  int64_t positions() const { return std::max<int64_t>(len - 1, 1); }  // x positions it fills
};

std::vector<Piece> split_pieces(const std::vector<std::vector<int32_t>>& docs, int64_t block) {
  std::vector<Piece> out;
  for (size_t d = 0; d < docs.size(); ++d) {
    const int64_t n = static_cast<int64_t>(docs[d].size());
    for (int64_t off = 0; off < n; off += block) {
      const int64_t len = std::min(block + 1, n - off);
      out.push_back({static_cast<int32_t>(d), off, len});
      if (off + len >= n) break;
    }
  }
  return out;
}

TokenRows empty_rows(int64_t rows, int64_t width, int32_t pad_token) {
  TokenRows b;
  b.rows = rows;
  b.width = width;
  const size_t n = static_cast<size_t>(rows * width);
  b.x.assign(n, pad_token);
  b.y.assign(n, kIgnoreIndex);
  b.doc.assign(n, -1);
  b.offset.assign(static_cast<size_t>(rows), 0);
  return b;
}

// Batches of pieces[first, last), each row padded to `width` (0 = the longest in the batch).
void emit(const std::vector<std::vector<int32_t>>& docs, const std::vector<Piece>& pieces, size_t first, size_t last,
          int64_t width, int64_t batch_rows, int32_t pad_token, std::vector<TokenRows>* out) {
  for (size_t b = first; b < last; b += static_cast<size_t>(batch_rows)) {
    const size_t e = std::min(last, b + static_cast<size_t>(batch_rows));
    int64_t w = width;
    if (w == 0)
      for (size_t i = b; i < e; ++i) w = std::max(w, pieces[i].positions());
    TokenRows rows = empty_rows(static_cast<int64_t>(e - b), w, pad_token);
    for (size_t i = b; i < e; ++i) {
      const Piece& p = pieces[i];
      const int32_t* tok = docs[static_cast<size_t>(p.doc)].data() + p.offset;
      const size_t base = (i - b) * static_cast<size_t>(w);
      rows.offset[i - b] = p.offset;
      for (int64_t t = 0; t < p.positions(); ++t) {
        rows.x[base + static_cast<size_t>(t)] = tok[t];
        rows.doc[base + static_cast<size_t>(t)] = p.doc;
        if (t + 1 < p.len) rows.y[base + static_cast<size_t>(t)] = tok[t + 1];
      }
    }
    out->push_back(std::move(rows));
  }
}

}  // namespace

int64_t TokenRows::padding() const { return static_cast<int64_t>(std::count(doc.begin(), doc.end(), -1)); }

int64_t TokenRows::targets() const {
  return static_cast<int64_t>(y.size()) - static_cast<int64_t>(std::count(y.begin(), y.end(), kIgnoreIndex));
}

BatchingStats batching_stats(const std::vector<TokenRows>& batches) {
  BatchingStats s;
  for (const auto& b : batches) {
    s.batches += 1;
    s.positions += b.positions();
    s.padding += b.padding();
    s.targets += b.targets();
  }
  return s;
}

std::vector<TokenRows> pad_batches(const std::vector<std::vector<int32_t>>& docs, int64_t block, int64_t batch_rows,
                                   int32_t pad_token) {
  const std::vector<Piece> pieces = split_pieces(docs, block);
  std::vector<TokenRows> out;
  emit(docs, pieces, 0, pieces.size(), block, batch_rows, pad_token, &out);
  return out;
}

std::vector<TokenRows> bucket_batches(const std::vector<std::vector<int32_t>>& docs, int64_t block, int64_t batch_rows,
                                      int32_t pad_token, uint64_t seed, int64_t window_batches) {
  std::vector<Piece> pieces = split_pieces(docs, block);
  const size_t window = static_cast<size_t>(std::max<int64_t>(1, window_batches) * batch_rows);
  std::vector<TokenRows> out;
  for (size_t w = 0; w < pieces.size(); w += window) {
    const size_t e = std::min(pieces.size(), w + window);
    // Stable: equal lengths keep document order, so the result depends on the inputs alone.
    std::stable_sort(pieces.begin() + static_cast<long>(w), pieces.begin() + static_cast<long>(e),
                     [](const Piece& a, const Piece& b) { return a.len > b.len; });
    emit(docs, pieces, w, e, 0, batch_rows, pad_token, &out);
  }
  // Fisher-Yates with an explicit generator: std::shuffle's sequence is not fixed by the standard.
  std::mt19937_64 rng(seed);
  for (size_t i = out.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng() % i);
    std::swap(out[i - 1], out[j]);
  }
  return out;
}

std::vector<TokenRows> pack_batches(const std::vector<std::vector<int32_t>>& docs, int64_t block, int64_t batch_rows,
                                    int32_t separator, int32_t pad_token) {
  std::vector<int32_t> stream;
  std::vector<int32_t> owner;  // document of each stream token (a separator belongs to the one it ends)
  for (size_t d = 0; d < docs.size(); ++d) {
    if (docs[d].empty()) continue;
    stream.insert(stream.end(), docs[d].begin(), docs[d].end());
    stream.push_back(separator);
    owner.insert(owner.end(), docs[d].size() + 1, static_cast<int32_t>(d));
  }
  std::vector<TokenRows> out;
  const int64_t n = static_cast<int64_t>(stream.size());
  int64_t start = 0;
  while (start + 1 < n) {
    int64_t rows = 0;
    TokenRows b = empty_rows(batch_rows, block, pad_token);
    for (; rows < batch_rows && start + 1 < n; ++rows, start += block) {
      const int64_t len = std::min(block, n - 1 - start);
      const size_t base = static_cast<size_t>(rows * block);
      b.offset[static_cast<size_t>(rows)] = start;
      for (int64_t t = 0; t < len; ++t) {
        const size_t i = static_cast<size_t>(start + t);
        b.x[base + static_cast<size_t>(t)] = stream[i];
        b.doc[base + static_cast<size_t>(t)] = owner[i];
        // The first token of a document is not predicted from the previous one's separator.
        if (owner[i + 1] == owner[i]) b.y[base + static_cast<size_t>(t)] = stream[i + 1];
      }
    }
    b.rows = rows;
    const size_t used = static_cast<size_t>(rows * block);
    b.x.resize(used);
    b.y.resize(used);
    b.doc.resize(used);
    b.offset.resize(static_cast<size_t>(rows));
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace frugal
