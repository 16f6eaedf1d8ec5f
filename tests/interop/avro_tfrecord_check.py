#!/usr/bin/env python3
"""`frugal prepare --format avro | tfrecord` against files the reference writers produce: Avro
container files written by `fastavro`, TFRecord files framed by TensorBoard's RecordWriter (the
framing TensorFlow writes, its own masked CRC-32C) holding tf.train.Example messages serialised by
the `protobuf` library from frugal's schema (src/data/proto/tf_example.proto, compiled here by
protoc into a descriptor set).

1. Documents: texts in two Avro files (codecs null and deflate, a nullable text field with a null
   and an empty value) and in a TFRecord file; the token stream (byte tokens) of train + val is
   every non-empty text in file and record order, each followed by the separator "\\n\\n".
2. Images: PNG and JPEG images with labels (Avro: string labels; TFRecord: int64 labels) give
   exactly the records (pixels and class ids, train and val) that the same images and labels give
   as a WebDataset tar (`--format tar`, tested against the image decoders elsewhere).
3. Refusals, exit 2 with the file named and nothing left behind: a TFRecord file with a flipped
   data byte (the CRC), one cut short, an Avro file cut inside a block, a file that is not Avro, and
   records without the fields asked for (the fields they have listed).

Usage: avro_tfrecord_check.py FRUGAL_BINARY PROTO_DIR. Exits 77 (skipped) when fastavro, Pillow,
tensorboard or protoc is missing or this frugal was built without Avro or TFRecord support.
"""
import io
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile

from interop_common import Check, check_refusal, dataset_items

try:
    import fastavro
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from PIL import Image
    from tensorboard.summary.writer.record_writer import RecordWriter
except ImportError as e:
    print(f"skipped: {e} (scripts/install-deps.sh installs it)")
    sys.exit(77)

CHECK = Check("avro_tfrecord_check")
fail = CHECK.fail


def prepare(frugal, inputs, out, fmt, *extra, expect=0):
    p = subprocess.run([frugal, "prepare", *inputs, "--out", out, "--format", fmt, "--quiet", *extra],
                       capture_output=True, text=True)
    if p.returncode == 2 and "built without" in p.stderr:
        print(f"skipped: {p.stderr.strip()}")
        sys.exit(77)
    if p.returncode != expect:
        fail(f"prepare --format {fmt} {inputs} exited {p.returncode}, expected {expect}:\n{p.stdout[-800:]}\n"
             f"{p.stderr[-1500:]}")
    return p


def example_class(proto_dir, tmp):
    """tensorflow.Example as a protobuf message class, from protoc's descriptor set of the schema."""
    protoc = shutil.which("protoc")
    if not protoc:
        print("skipped: protoc is not installed (scripts/install-deps.sh installs protobuf-compiler)")
        sys.exit(77)
    desc = os.path.join(tmp, "tf_example.desc")
    subprocess.run([protoc, "-I", proto_dir, "--descriptor_set_out", desc, "tf_example.proto"], check=True)
    fds = descriptor_pb2.FileDescriptorSet.FromString(open(desc, "rb").read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


def write_tfrecord(path, examples):
    with open(path, "wb") as f:
        w = RecordWriter(f)
        for e in examples:
            w.write(e.SerializeToString())
        w.flush()


def example(Example, **features):
    e = Example()
    for name, value in features.items():
        feat = e.features.feature[name]
        if isinstance(value, int):
            feat.int64_list.value.append(value)
        else:
            feat.bytes_list.value.append(value if isinstance(value, bytes) else value.encode("utf-8"))
    return e


def check_documents(frugal, tmp, Example):
    a = [f"document {i}: café ☕ {'x' * (i % 7)}" for i in range(30)]
    a[4], a[8] = None, ""
    b = [f"second file, record {i}\nwith a second line" for i in range(12)]
    schema = {"type": "record", "name": "Doc", "fields": [{"name": "id", "type": "long"},
                                                         {"name": "text", "type": ["null", "string"]}]}
    fa, fb = os.path.join(tmp, "a.avro"), os.path.join(tmp, "b.avro")
    with open(fa, "wb") as f:
        fastavro.writer(f, schema, [{"id": i, "text": t} for i, t in enumerate(a)], sync_interval=200)
    with open(fb, "wb") as f:
        fastavro.writer(f, schema, [{"id": i, "text": t} for i, t in enumerate(b)], codec="deflate")
    want = [t for d in a + b if d for t in list(d.encode("utf-8")) + [10, 10]]
    ds = os.path.join(tmp, "docs-avro")
    prepare(frugal, [fa, fb], ds, "avro", "--dedup", "none", "--val-fraction", "0.1")
    m, items = dataset_items(ds)
    if items["train"] + items["val"] != want:
        fail(f"avro: the token stream differs from the texts' bytes ({len(items['train'] + items['val'])} vs "
             f"{len(want)} tokens)")
    ft = os.path.join(tmp, "docs.tfrecord")
    write_tfrecord(ft, [example(Example, text=d, id=i) for i, d in enumerate(x for x in a + b if x is not None)])
    ds = os.path.join(tmp, "docs-tfrecord")
    prepare(frugal, [ft], ds, "tfrecord", "--dedup", "none", "--val-fraction", "0.1")
    _, items = dataset_items(ds)
    if items["train"] + items["val"] != want:
        fail("tfrecord: the token stream differs from the texts' bytes")
    return len(want)


def images(n):
    rng = random.Random(3)
    out = []
    for i in range(n):
        img = Image.new("RGB", (20 + i, 16 + 2 * i))
        img.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(img.width * img.height)])
        buf = io.BytesIO()
        img.save(buf, "PNG" if i % 2 else "JPEG", quality=90)
        out.append((buf.getvalue(), "png" if i % 2 else "jpg", ["cat", "dog", "ant"][i % 3], i % 4))
    return out


def check_images(frugal, tmp, Example):
    imgs = images(14)
    tar = os.path.join(tmp, "imgs.tar")
    with tarfile.open(tar, "w") as t:
        for i, (data, ext, name, num) in enumerate(imgs):
            for member, payload in ((f"s{i:03d}.{ext}", data), (f"s{i:03d}.cls", name.encode())):
                info = tarfile.TarInfo(member)
                info.size = len(payload)
                t.addfile(info, io.BytesIO(payload))
    schema = {"type": "record", "name": "Img", "fields": [{"name": "image", "type": "bytes"},
                                                         {"name": "label", "type": "string"}]}
    fa = os.path.join(tmp, "imgs.avro")
    with open(fa, "wb") as f:
        fastavro.writer(f, schema, [{"image": d, "label": name} for d, _, name, _ in imgs])
    opts = ("--size", "8", "--val-fraction", "0.25", "--seed", "4")

    def prepared(inputs, name, fmt):
        out = os.path.join(tmp, name)
        prepare(frugal, inputs, out, fmt, *opts)
        return dataset_items(out)

    want_m, want = prepared([tar], "img-tar", "tar")
    m, got = prepared([fa], "img-avro", "avro")
    if got != want or m["classes"] != want_m["classes"]:
        fail(f"avro: the image records differ from the same images and labels as a tar ({m['classes']} vs "
             f"{want_m['classes']})")
    # Integer labels: the class ids themselves.
    with tarfile.open(os.path.join(tmp, "imgs-int.tar"), "w") as t:
        for i, (data, ext, _, num) in enumerate(imgs):
            for member, payload in ((f"s{i:03d}.{ext}", data), (f"s{i:03d}.cls", str(num).encode())):
                info = tarfile.TarInfo(member)
                info.size = len(payload)
                t.addfile(info, io.BytesIO(payload))
    ft = os.path.join(tmp, "imgs.tfrecord")
    write_tfrecord(ft, [example(Example, image=d, label=num) for d, _, _, num in imgs])
    want_m, want = prepared([os.path.join(tmp, "imgs-int.tar")], "int-tar", "tar")
    m, got = prepared([ft], "img-tfr", "tfrecord")
    if got != want or m["classes"] != want_m["classes"]:
        fail("tfrecord: the image records differ from the same images and labels as a tar")
    return len(imgs)


def check_refusals(frugal, tmp, Example):
    cases = []
    good = open(os.path.join(tmp, "docs.tfrecord"), "rb").read()
    flipped = bytearray(good)
    first = 12 + int.from_bytes(good[:8], "little") + 4  # record 1 starts here
    flipped[first + 12 + 3] ^= 0x40
    path = os.path.join(tmp, "flipped.tfrecord")
    open(path, "wb").write(bytes(flipped))
    cases.append(([path], "tfrecord", [path, "record 1", "CRC"]))
    path = os.path.join(tmp, "short.tfrecord")
    open(path, "wb").write(good[:len(good) - 7])
    cases.append(([path], "tfrecord", [path, "truncated"]))
    avro = open(os.path.join(tmp, "a.avro"), "rb").read()
    path = os.path.join(tmp, "short.avro")
    open(path, "wb").write(avro[:len(avro) * 2 // 3])
    cases.append(([path], "avro", [path]))
    path = os.path.join(tmp, "notes.avro")
    open(path, "w").write("this is a text file, not Avro\n" * 10)
    cases.append(([path], "avro", [path]))
    path = os.path.join(tmp, "fields.avro")
    with open(path, "wb") as f:
        fastavro.writer(f, {"type": "record", "name": "R", "fields": [{"name": "body", "type": "string"}]},
                        [{"body": "x"}])
    cases.append(([path], "avro", [path, "record 0", "'text'", "'body'"]))
    path = os.path.join(tmp, "fields.tfrecord")
    write_tfrecord(path, [example(Example, caption="x")])
    cases.append(([path], "tfrecord", [path, "record 0", "'caption'"]))
    for i, (inputs, fmt, words) in enumerate(cases):
        out = os.path.join(tmp, f"bad{i}")
        check_refusal(fail, f"case {i}", out, prepare(frugal, inputs, out, fmt, expect=2), words)
    return len(cases)


def main():
    frugal, proto_dir = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        Example = example_class(proto_dir, tmp)
        tokens = check_documents(frugal, tmp, Example)
        n = check_images(frugal, tmp, Example)
        refused = check_refusals(frugal, tmp, Example)
    print(f"avro_tfrecord_check: fastavro {fastavro.__version__}: documents from 2 Avro files (codecs null and "
          f"deflate, a null and an empty text) and a TFRecord file -> {tokens} tokens equal to the texts' bytes; "
          f"{n} PNG/JPEG images with string (Avro) and int64 (TFRecord) labels -> the records a tar of them gives; "
          f"{refused} bad inputs refused by name")


if __name__ == "__main__":
    main()
