// One line of a JSONL input of `frugal prepare` (--format jsonl, chat, prompt-completion) read as a
// JSON object, with messages that name the file, the line and what is wrong (document_reader.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace frugal::detail {

// `line` (line `line_no` of `path`, starting at byte `offset` of the file) as a JSON object.
// Throws DataError naming the file and line: invalid UTF-8 (with the file's byte offset and iconv
// as the way out), invalid JSON (its column and the parser's reason), or a value of another type
// (e.g. "a JSON array, not an object"); `expected` shows the object wanted, e.g. {"text": ...}.
nlohmann::json parse_jsonl_object(std::string_view line, const std::string& path, int64_t line_no, size_t offset,
                                  const std::string& expected);

// What a JSON value is, for messages: "a number (5)", "an array ([1,2])", "null", "a string ("x")"
// (the value cut at 40 characters).
std::string json_kind(const nlohmann::json& v);

// The keys of a JSON object, for messages: "\"a\", \"b\"", or "none".
std::string json_fields(const nlohmann::json& object);

}  // namespace frugal::detail
