#!/usr/bin/env python3
"""A safetensors reader and writer written from the format's specification alone (json, struct
and numpy), to check strata's checkpoints against an implementation that shares no code with
them (tests/checkpoint/interop_test.cpp).

  safetensors_reference.py check FILE   read FILE, check its layout, and check that every tensor
                                         named in EXPECTED holds expected_values(...); exit 1
                                         with a reason otherwise
  safetensors_reference.py write FILE   write FILE with the tensors of EXPECTED

The values of element i of a tensor are a formula of i and the dtype (expected_values), which
interop_test.cpp computes on its side too.
"""

import json
import struct
import sys

import numpy as np

# name: (dtype, shape)
EXPECTED = {
    "weights": ("F32", [2, 3, 5]),
    "bias": ("F64", [7]),
    "half": ("F16", [13]),
    "brain": ("BF16", [4, 4]),
    "small": ("I8", [11]),
    "bytes": ("U8", [3]),
    "ints": ("I32", [5]),
    "step": ("I64", []),
    "empty": ("F32", [0, 4]),
}

NUMPY = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I8": "i1", "U8": "u1", "I32": "<i4",
         "I64": "<i8"}
ITEM = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I8": 1, "U8": 1, "I32": 4, "I64": 8}


def expected_values(dtype, count):
    i = np.arange(count, dtype=np.int64)
    if dtype in ("F32", "F64", "F16", "BF16"):
        return (i % 17) * 0.25 - 2.0  # exact in every float type
    if dtype == "I8":
        return (i * 7) % 200 - 100
    if dtype == "U8":
        return (i * 7) % 256
    if dtype == "I32":
        return (i - 2) * 100000007
    if dtype == "I64":
        return (i + 3) * 1000000000007
    raise ValueError(dtype)


def decode(dtype, raw):
    if dtype == "BF16":  # the upper half of a float32
        halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return halves.view("<f4").astype(np.float64)
    return np.frombuffer(raw, dtype=NUMPY[dtype]).astype(np.float64)


def encode(dtype, values):
    if dtype == "BF16":
        bits = np.asarray(values, dtype="<f4").view("<u4")
        return (bits >> 16).astype("<u2").tobytes()
    return np.asarray(values).astype(NUMPY[dtype]).tobytes()


def fail(message):
    print("safetensors_reference: " + message)
    sys.exit(1)


def check(path):
    with open(path, "rb") as f:
        content = f.read()
    (length,) = struct.unpack("<Q", content[:8])
    if (8 + length) % 8 != 0:
        fail(f"the data starts at {8 + length}, not at a multiple of 8")
    header_bytes = content[8:8 + length]
    if header_bytes[:1] != b"{":
        fail("the header does not start with '{'")
    header = json.loads(header_bytes.decode("utf-8"))
    data = content[8 + length:]
    metadata = header.pop("__metadata__", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        fail("__metadata__ is not a map of strings")
    spans = sorted((entry["data_offsets"][0], entry["data_offsets"][1], name)
                   for name, entry in header.items())
    position = 0
    for begin, end, name in spans:
        if begin != position:
            fail(f"tensor {name} starts at {begin}, expected {position}")
        entry = header[name]
        count = int(np.prod(entry["shape"], dtype=np.int64))
        if end - begin != count * ITEM[entry["dtype"]]:
            fail(f"tensor {name} has {end - begin} bytes for {count} elements")
        if begin % ITEM[entry["dtype"]] != 0:
            fail(f"tensor {name} starts at {begin}, not aligned to its element")
        position = end
    if position != len(data):
        fail(f"tensors cover {position} of {len(data)} data bytes")
    for name, (dtype, shape) in EXPECTED.items():
        if name not in header:
            fail(f"no tensor {name}")
        entry = header[name]
        if entry["dtype"] != dtype or entry["shape"] != shape:
            fail(f"{name} is {entry['dtype']} {entry['shape']}, expected {dtype} {shape}")
        begin, end = entry["data_offsets"]
        got = decode(dtype, data[begin:end])
        want = expected_values(dtype, got.size)
        if not np.array_equal(got, want.astype(np.float64)):
            fail(f"{name} holds {got[:8]}..., expected {want[:8]}...")
    print(json.dumps({"tensors": len(header), "metadata": metadata}))


def write(path):
    header = {"__metadata__": {"writer": "safetensors_reference.py"}}
    blobs = []
    offset = 0
    # Largest elements first, so every tensor is aligned, as the reference library does.
    for name, (dtype, shape) in sorted(EXPECTED.items(), key=lambda kv: -ITEM[kv[1][0]]):
        count = int(np.prod(shape, dtype=np.int64))
        blob = encode(dtype, expected_values(dtype, count))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("check", "write"):
        print(__doc__)
        sys.exit(2)
    (check if sys.argv[1] == "check" else write)(sys.argv[2])
