#!/usr/bin/env python3
"""Writes TensorBoard's own event-file schema as a protobuf FileDescriptorSet, for protoc.

frugal writes TensorBoard event files with Debian's protobuf library; the message definitions
(tensorboard.Event, Summary, TensorProto, ...) are TensorBoard's, taken from the tensorboard
package of the Python that builds frugal (scripts/requirements.txt pins it), so the files frugal
writes follow the schema of the very reader its tests use. CMake runs this at configure time:

    python scripts/tensorboard_schema.py OUT.desc   # prints the .proto names, in dependency order

and then `protoc --descriptor_set_in=OUT.desc --cpp_out=DIR <names>`. Exit 1 (with a line on
stderr) when tensorboard is not importable: the TENSORBOARD feature is then switched off.
"""
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: tensorboard_schema.py OUT.desc", file=sys.stderr)
        return 2
    try:
        from google.protobuf import descriptor_pb2
        from tensorboard.compat.proto import event_pb2
    except ImportError as e:
        print(f"tensorboard_schema.py: {e}", file=sys.stderr)
        return 1
    files = []

    def walk(fd):
        for dep in fd.dependencies:
            walk(dep)
        if fd.name not in [f.name for f in files]:
            files.append(fd)

    walk(event_pb2.DESCRIPTOR)
    out = descriptor_pb2.FileDescriptorSet()
    for fd in files:
        fd.CopyToProto(out.file.add())
    with open(sys.argv[1], "wb") as f:
        f.write(out.SerializeToString())
    print(";".join(fd.name for fd in files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
