// Avro container files and TFRecord files as `frugal prepare` input (--format avro | tfrecord;
// docs/data.md). Each record becomes a sample as a WebDataset tar's are (tar_samples.h), keyed
// "record N" (N counted from 0 in the file), so prepare treats the three formats alike:
//   - a text field (fields.text, the --text-column) -> member "txt": a document of a token dataset;
//   - an image field (fields.image, bytes of a JPEG or PNG) -> member "jpg" or "png" (by the
//     bytes' signature), with the label field (fields.label: an integer or a string) -> "cls":
//     a sample of an image record dataset.
// A record holding neither field, an image without a label, an image field that is neither JPEG
// nor PNG, or a field of another type is a DataError naming the file, the record and the field.
//
// Avro: object container files (what fastavro, Spark and Avro's own writers produce; codecs null
// and deflate, and those Debian's libavro was built with), read by Debian's Avro C library with the
// file's own writer schema. Fields may be nullable (a union with null; a null text is an empty
// document, skipped as empty ones are; a null image counts as absent, a null label beside an image
// is refused); a string or bytes field serves as text, an int or long or string as the label (read
// beside an image only). A truncated or corrupt file is a DataError with the library's message (a
// file cut exactly at a block boundary reads as a shorter file: the format has no record count).
//
// TFRecord: frames of [u64 length][u32 masked CRC-32C of the length][data][u32 masked CRC-32C of
// the data] (TensorFlow's framing; both CRCs checked), each data a serialized tf.train.Example
// (src/data/proto/tf_example.proto): features by name, a bytes_list of one value as text or image,
// an int64_list or bytes_list of one value as the label. A CRC mismatch, a frame running past the
// end of the file or an Example that does not parse is a DataError naming the file, the record
// and its byte offset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/data/tar_samples.h"

namespace frugal {

struct RecordFields {
  std::string text = "text";
  std::string image = "image";
  std::string label = "label";
};

// The records of an Avro container file as samples. Throws DataError (and ConfigError in a build
// without Avro: frugal doctor lists the features).
std::vector<TarSample> read_avro_samples(const std::string& path, const RecordFields& fields);

// The data of every frame of a TFRecord file, in order, both CRCs checked.
std::vector<std::string> read_tfrecords(const std::string& path);
// The records of a TFRecord file of tf.train.Example as samples. Throws DataError (and ConfigError
// in a build without TFRecord support).
std::vector<TarSample> read_tfrecord_samples(const std::string& path, const RecordFields& fields);

// TensorFlow's masked CRC-32C of `data`, as a TFRecord frame stores it.
uint32_t tfrecord_masked_crc(const std::string& data);

}  // namespace frugal
