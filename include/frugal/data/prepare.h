// `frugal prepare`: turns raw inputs into a dataset once, so training never re-reads,
// re-tokenises, re-decodes or re-augments. Text (plain, JSONL, or the .txt members of
// WebDataset-style tars) is split into documents, deduplicated, tokenised in parallel and written
// as token shards; images (a folder with one sub-folder per class, or the .jpg/.png + .cls
// members of tars) are decoded, resized and optionally augmented in parallel, and tables (CSV)
// parsed, into record shards (docs/formats/shards.md). Everything is written, with
// manifest.json (docs/data.md), into a temporary folder that is renamed over --out only when
// complete.
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
  kText,              // documents are separated by blank lines
  kJsonl,             // one JSON object per line; the document is the string field `jsonl_field`
  kImages,            // a folder with one sub-folder of JPEG/PNG files per class -> record shards
  kTar,               // WebDataset-style tars: key.jpg/key.png + key.cls -> records; key.txt -> tokens
  kCsv,               // a header row, numeric feature columns and a label column -> record shards
  kParquet,           // Parquet files (FRUGAL_WITH_PARQUET): the string column `jsonl_field` -> documents;
                      // without that column, numeric feature columns and a label column -> record shards
  kChat,              // jsonl of {"messages": [{role, content}, ...]}: rendered with the chat template, stored
                      // one document a record with its loss mask (the assistant's tokens)
  kPromptCompletion,  // jsonl of {"prompt", "completion"} (strings, or lists of messages): the same,
                      // trained on the completion
  kAvro,              // Avro container files: the string field `jsonl_field` -> documents; or the bytes field
                      // `image_field` (JPEG/PNG) and the label field `label_column` -> record shards
  kTfrecord,          // TFRecord files of tf.train.Example, likewise by feature name (CRCs checked)
};

// How image pixels are stored in record shards.
enum class PixelStorage {
  kUint8,  // the 8-bit values (1 byte per value); the loader divides by 255
  kFp16,   // value / 255 as IEEE half (2 bytes per value): for cached features, or to skip the
           // conversion in the loader
};

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, or folders (all regular files inside, sorted)
  std::string out_dir;
  InputFormat format = InputFormat::kText;
  std::string jsonl_field = "text";  // jsonl: the document's field; parquet: its string column
  // --text-column was given: Parquet files without that column are an error, not a table (as they
  // are when jsonl_field is other than "text").
  bool text_column_named = false;
  // "bytes" (vocab 256), "sentencepiece" (train a model of `vocab` pieces on the input),
  // "sentencepiece:PATH.model" (use an existing model) or "hf:PATH/tokenizer.json" (a Hugging
  // Face tokenizer, run by the `tokenizers` library: data/tokenizer.h).
  std::string tokenizer = "bytes";
  int64_t vocab = 8000;  // sentencepiece training only
  DedupOptions dedup;
  double val_fraction = 0.05;               // the last fraction of the token stream is validation
  int64_t shard_tokens = int64_t{1} << 26;  // tokens per shard file (64 Mi)
  bool zstd = false;                        // zstd-compress shard blocks (smaller, slower first read)
  int threads = 0;                          // tokeniser threads; 0 = the CPUs this process may use
  bool force = false;                       // rebuild even when the cache says up to date

  // Record datasets (images, tar images, csv).
  int image_size = 32;  // images are resized once to image_size x image_size
  PixelStorage pixels = PixelStorage::kUint8;
  int augment = 0;                    // augmented variants stored per training image (besides the original)
  uint64_t seed = 0;                  // the validation hold-out and the augmentation draws
  std::string label_column;           // csv, parquet: the label column (empty = the last); avro, tfrecord: "label"
  std::string image_field = "image";  // avro, tfrecord: the field holding an encoded JPEG or PNG
  int64_t shard_records = 65536;      // records per record shard file
  // Chat and prompt-completion documents (a Hugging Face tokenizer, hf:DIR/tokenizer.json).
  std::string chat_template;          // a Jinja file; "" = the tokenizer folder's own template
  bool train_on_prompt = false;       // train on every token, not only the assistant's / completion's
  int64_t max_tokens = 0;             // longer documents are cut as `overflow` says; 0 = no limit
  std::string overflow = "truncate";  // "truncate" (keep the first max_tokens) or "split" (pieces)
};

struct PrepareReport {
  bool up_to_date = false;
  std::string kind = "tokens";  // "tokens", "records" or "documents" (the manifest's kind)
  std::string out_dir;
  std::string tokenizer;
  int64_t vocab = 0;
  int64_t sources = 0, bytes_in = 0, bytes_kept = 0;  // input bytes, and those left after dedup
  int64_t documents_in = 0, documents = 0;            // before and after dedup
  int64_t exact_removed = 0, near_removed = 0;
  int64_t tokens = 0, train_tokens = 0, val_tokens = 0;
  int64_t shards = 0, bytes_out = 0;
  // Record datasets: samples (images or rows) and records (training records include the
  // augmented variants), classes, and the decode + resize + augment phase alone.
  int64_t train_samples = 0, val_samples = 0, train_records = 0, val_records = 0, classes = 0;
  std::string record_content;  // "image" or "table"; documents: "chat" or "prompt-completion"
  std::string record_shape;    // e.g. "uint8 [3, 32, 32]"
  double decode_s = 0;
  // Chat and prompt-completion documents: tokens trained on, documents cut at --max-tokens, and
  // documents left with no token to train on (dropped).
  int64_t target_tokens = 0, truncated_documents = 0, split_documents = 0, dropped_documents = 0;
  // What frugal train will need and this dataset lacks (an empty validation split): printed after
  // the report, each as "warning: ...".
  std::vector<std::string> warnings;
  int threads = 1;
  double tokenize_s = 0;  // wall time of tokenisation alone
  double seconds = 0;     // the whole call
};

// Status lines for a progress display (phase, amounts, throughput).
using PrepareProgress = std::function<void(const std::string&)>;

// Throws DataError (unreadable input, malformed JSONL with file:line, a corrupt image naming the
// file, an unsafe tar member naming member and archive, a bad CSV cell naming file, line,
// column and value, empty corpus, a training split that would be empty or have no target: nothing
// is published then) or
// ConfigError (bad options, --dedup with a format that has no text documents, an --out that is a
// file, lies below one, or is a folder that is not a dataset). A symbolic link at --out is kept:
// the dataset is written where it points.
PrepareReport prepare_dataset(const PrepareOptions& options, const PrepareProgress& progress = nullptr);

// The human-readable final report (several lines), then the report's warnings.
std::string format_report(const PrepareReport& report);

}  // namespace frugal
