"""Reads a TensorBoard event file independently of Loom's writer.

Checks the TFRecord framing and both masked CRC32Cs (crcmod), decodes each
record with the protobuf runtime against an Event schema built here from
TensorBoard's field numbers, and prints one line per scalar:
    <tag> <step> <value>
Exits non-zero on any framing, checksum or decoding error.
"""
import struct
import sys

import crcmod.predefined
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_crc = crcmod.predefined.mkCrcFun("crc-32c")


def masked(data):
    c = _crc(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    f = descriptor_pb2.FileDescriptorProto(name="tb_check.proto", package="tbcheck")
    F = descriptor_pb2.FieldDescriptorProto
    value = f.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    summary = f.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".tbcheck.Value")
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tbcheck.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.MessageFactory(pool).GetPrototype(pool.FindMessageTypeByName("tbcheck.Event"))


def main(path):
    Event = event_class()
    data = open(path, "rb").read()
    pos, n = 0, 0
    while pos < len(data):
        if pos + 12 > len(data):
            sys.exit("truncated header at byte %d" % pos)
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if hcrc != masked(header):
            sys.exit("bad length crc at byte %d" % pos)
        payload = data[pos + 12:pos + 12 + length]
        (pcrc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if len(payload) != length or pcrc != masked(payload):
            sys.exit("bad payload crc at byte %d" % pos)
        ev = Event()
        ev.ParseFromString(payload)
        if n == 0 and ev.file_version != "brain.Event:2":
            sys.exit("first record is not the file version: %r" % ev.file_version)
        for v in ev.summary.value:
            print("%s %d %.6g" % (v.tag, ev.step, v.simple_value))
        pos += 16 + length
        n += 1
    print("records %d" % n)


if __name__ == "__main__":
    main(sys.argv[1])
