// `frugal prepare INPUT... --out DIR [options]`: tokenise (and dedup) a corpus, or decode images /
// parse a table, once into shards.
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "frugal/core/console.h"
#include "frugal/data/prepare.h"

namespace frugal::cli {

namespace {
struct PrepareArgs {
  PrepareOptions o;
  std::string format = "text", dedup = "none", pixels = "uint8";
  bool quiet = false;
  CLI::Option* text_column = nullptr;  // given on the command line: o.text_column_named
};

// Images, tar, CSV and Parquet tables.
void add_record_options(CLI::App* cmd, PrepareArgs* a) {
  cmd->add_option("--size", a->o.image_size, "images: resize every image once to SIZE x SIZE pixels (RGB)")
      ->check(in_range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--pixels", a->pixels, "images: store pixels as uint8 (1 byte) or fp16 (value/255, 2 bytes)")
      ->check(CLI::IsMember({"uint8", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--augment", a->o.augment,
                  "images: store N seeded augmented variants (random crop with padding, horizontal flip, "
                  "colour jitter) of every training image besides the original")
      ->check(in_range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--seed", a->o.seed,
                  "images, tar, csv, parquet, avro, tfrecord, chat, prompt-completion: seed of the validation "
                  "hold-out and the augmentations")
      ->capture_default_str();
  cmd->add_option("--label-column", a->o.label_column,
                  "csv, parquet: the label column (default: the last column); avro, tfrecord: the label field "
                  "(default: label)");
  cmd->add_option("--image-field", a->o.image_field,
                  "avro, tfrecord: the field holding an encoded JPEG or PNG image (bytes)")
      ->capture_default_str();
  cmd->add_option(
         "--shard-records", a->o.shard_records,
         "images, tar, csv, parquet, avro, tfrecord, chat, prompt-completion: records (documents) per shard file")
      ->check(in_range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
}

// Chat and prompt-completion documents.
void add_chat_options(CLI::App* cmd, PrepareArgs* a) {
  cmd->add_option("--chat-template", a->o.chat_template,
                  "chat, prompt-completion: a Jinja chat template file to render with instead of the tokenizer "
                  "folder's own (tokenizer_config.json's chat_template or chat_template.jinja)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--train-on-prompt", a->o.train_on_prompt,
                "chat, prompt-completion: train on every token, not only the assistant's / the completion's");
  cmd->add_option("--max-tokens", a->o.max_tokens,
                  "chat, prompt-completion: documents longer than this are cut as --overflow says; 0 = no limit")
      ->check(in_range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--overflow", a->o.overflow,
                  "chat, prompt-completion: truncate (keep the first --max-tokens tokens) or split (into pieces of "
                  "--max-tokens); a piece left with no token to train on is dropped, and counted")
      ->check(CLI::IsMember({"truncate", "split"}))
      ->capture_default_str();
}
}  // namespace

void add_prepare_command(CLI::App& app, Run* run) {
  auto a = std::make_shared<PrepareArgs>();
  auto* cmd =
      app.add_subcommand("prepare",
                         "Prepare a dataset once into a folder of checksummed shards plus manifest.json: text is "
                         "tokenised into token shards (train with data.source=shards:DIR); images and CSV tables are "
                         "decoded into record shards (data.source=records:DIR); chat and prompt-completion documents "
                         "are stored with their loss masks (see them with frugal inspect DIR). Re-running with the "
                         "same options on "
                         "unchanged inputs does nothing (inputs are content-hashed). Formats: docs/data.md, "
                         "docs/formats/shards.md.");
  cmd->add_option("inputs", a->o.inputs, "input files or folders (every file inside, sorted; hidden ones skipped)")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--out", a->o.out_dir, "dataset folder to write (replaced atomically)")->required();
  cmd->add_option("--format", a->format,
                  "text: documents separated by blank lines; jsonl: one JSON object per line; images: a "
                  "folder with one sub-folder of .jpg/.jpeg/.png files per class (or train/ and val/ "
                  "folders of those); tar: WebDataset-style tars (key.jpg|key.png + key.cls -> records, "
                  "key.txt -> tokens); csv: a header row, numeric feature columns and a label column; "
                  "parquet: Parquet files, the string column --text-column as documents, or without it numeric "
                  "feature columns and a label column as records; chat: jsonl of {\"messages\": [{role, content}, "
                  "...]}, rendered with the tokenizer's chat template and trained on the assistant's tokens; "
                  "prompt-completion: jsonl of {\"prompt\", \"completion\"} (strings or lists of messages), "
                  "trained on the completion (chat and prompt-completion need --tokenizer hf:DIR/tokenizer.json); "
                  "avro: Avro container files, tfrecord: TFRecord files of tf.train.Example (CRCs checked), both "
                  "with the text field --text-column as documents, or the JPEG/PNG field --image-field and the "
                  "label --label-column as image records")
      ->check(CLI::IsMember(
          {"text", "jsonl", "images", "tar", "csv", "parquet", "chat", "prompt-completion", "avro", "tfrecord"}))
      ->capture_default_str();
  a->text_column = cmd->add_option("--jsonl-field,--text-column", a->o.jsonl_field,
                                   "jsonl, avro, tfrecord: the string field holding the document; parquet: the "
                                   "string column holding it (named: files without it are an error, not a table)")
                       ->capture_default_str();
  cmd->add_option("--tokenizer", a->o.tokenizer,
                  "bytes (vocab 256) | sentencepiece (train one with --vocab pieces on the input) | "
                  "sentencepiece:PATH.model (use an existing model) | hf:PATH/tokenizer.json or hf:DIR holding one (a "
                  "Hugging Face tokenizer, run by the tokenizers library in FRUGAL_PYTHON)")
      ->capture_default_str();
  cmd->add_option("--vocab", a->o.vocab, "sentencepiece: vocabulary size to train")
      ->check(in_range(int64_t{64}, int64_t{1} << 22))
      ->capture_default_str();
  cmd->add_option("--dedup", a->dedup,
                  "text documents (text, jsonl, and the text of parquet, tar, avro, tfrecord): none | exact "
                  "(normalised-text hash) | near (exact, then MinHash + LSH on word shingles)")
      ->check(CLI::IsMember({"none", "exact", "near"}))
      ->capture_default_str();
  cmd->add_option("--near-threshold", a->o.dedup.near_threshold,
                  "near: Jaccard similarity of word-shingle sets at or above which documents are duplicates")
      ->check(in_range(0.05, 1.0))
      ->capture_default_str();
  cmd->add_option("--shingle", a->o.dedup.shingle_words, "near: words per shingle")
      ->check(in_range(1, 64))
      ->capture_default_str();
  add_record_options(cmd, a.get());
  add_chat_options(cmd, a.get());
  cmd->add_option(
         "--val-fraction", a->o.val_fraction,
         "text: the last fraction of the token stream held out for validation; images, csv, parquet tables: the "
         "fraction of samples held out (seeded), unless an images folder has train/ and val/; chat, "
         "prompt-completion: the fraction of documents held out (seeded)")
      ->check(in_range(0.0, 0.9))
      ->capture_default_str();
  cmd->add_option("--shard-tokens", a->o.shard_tokens, "tokens per shard file")
      ->check(in_range(int64_t{1024}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_flag("--zstd", a->o.zstd, "zstd-compress shard blocks");
  cmd->add_option("--threads", a->o.threads, "tokeniser / image decoder threads; 0 = all usable CPUs")
      ->check(in_range(0, 1024))
      ->capture_default_str();
  cmd->add_flag("--force", a->o.force, "rebuild even if the dataset is up to date");
  cmd->add_flag("--quiet", a->quiet, "print only the final report");
  cmd->callback([a, run] {
    *run = [a] {
      a->o.format = a->format == "chat"                ? InputFormat::kChat
                    : a->format == "prompt-completion" ? InputFormat::kPromptCompletion
                    : a->format == "jsonl"             ? InputFormat::kJsonl
                    : a->format == "images"            ? InputFormat::kImages
                    : a->format == "tar"               ? InputFormat::kTar
                    : a->format == "csv"               ? InputFormat::kCsv
                    : a->format == "parquet"           ? InputFormat::kParquet
                    : a->format == "avro"              ? InputFormat::kAvro
                    : a->format == "tfrecord"          ? InputFormat::kTfrecord
                                                       : InputFormat::kText;
      a->o.pixels = a->pixels == "fp16" ? PixelStorage::kFp16 : PixelStorage::kUint8;
      a->o.text_column_named = a->text_column->count() > 0;
      a->o.dedup.mode = a->dedup == "near"    ? DedupMode::kNear
                        : a->dedup == "exact" ? DedupMode::kExact
                                              : DedupMode::kNone;
      auto& con = Console::get();
      PrepareReport r = prepare_dataset(a->o, [&](const std::string& s) {
        if (!a->quiet) con.status("prepare: " + s);
      });
      con.finish_status();
      fmt::print("{}\n", format_report(r));
      return 0;
    };
  });
}

}  // namespace frugal::cli
