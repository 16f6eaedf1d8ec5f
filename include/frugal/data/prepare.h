// `frugal prepare`: turns raw text into a token dataset once, so training never re-reads,
// re-tokenises or re-deduplicates. Reads the inputs (files, or folders of files), splits them
// into documents, removes duplicates, tokenises in parallel, and writes token shards
// (docs/formats/shards.md) plus manifest.json (docs/data.md) into a temporary folder that is
// renamed over --out only when complete.
//
// Caching: the manifest records the options that shape the output and every input's size and
// xxhash64; a re-run with identical options on unchanged inputs finds them equal and returns
// up_to_date without writing anything.
//
// Memory: the documents and their tokens are held in memory (about 5 bytes per input byte with
// the byte tokenizer); split a corpus larger than RAM / 5 into several datasets.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "frugal/data/dedup.h"

namespace frugal {

enum class InputFormat {
  kText,   // documents are separated by blank lines
  kJsonl,  // one JSON object per line; the document is the string field `jsonl_field`
};

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, or folders (all regular files inside, sorted)
  std::string out_dir;
  InputFormat format = InputFormat::kText;
  std::string jsonl_field = "text";
  // "bytes" (vocab 256), "sentencepiece" (train a model of `vocab` pieces on the input) or
  // "sentencepiece:PATH.model" (use an existing model).
  std::string tokenizer = "bytes";
  int64_t vocab = 8000;  // sentencepiece training only
  DedupOptions dedup;
  double val_fraction = 0.05;           // the last fraction of the token stream is validation
  int64_t shard_tokens = int64_t{1} << 26;  // tokens per shard file (64 Mi)
  bool zstd = false;                    // zstd-compress shard blocks (smaller, slower first read)
  int threads = 0;                      // tokeniser threads; 0 = the CPUs this process may use
  bool force = false;                   // rebuild even when the cache says up to date
};

struct PrepareReport {
  bool up_to_date = false;
  std::string out_dir;
  std::string tokenizer;
  int64_t vocab = 0;
  int64_t sources = 0, bytes_in = 0, bytes_kept = 0;  // input bytes, and those left after dedup
  int64_t documents_in = 0, documents = 0;  // before and after dedup
  int64_t exact_removed = 0, near_removed = 0;
  int64_t tokens = 0, train_tokens = 0, val_tokens = 0;
  int64_t shards = 0, bytes_out = 0;
  int threads = 1;
  double tokenize_s = 0;  // wall time of tokenisation alone
  double seconds = 0;     // the whole call
};

// Status lines for a progress display (phase, amounts, throughput).
using PrepareProgress = std::function<void(const std::string&)>;

// Throws DataError (unreadable input, malformed JSONL with file:line, empty corpus) or
// ConfigError (bad options, an --out that exists but is not a dataset).
PrepareReport prepare_dataset(const PrepareOptions& options, const PrepareProgress& progress = nullptr);

// The human-readable final report (several lines).
std::string format_report(const PrepareReport& report);

}  // namespace frugal
