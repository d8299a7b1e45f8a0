"""The flush's sort on integer codes against the plain reference: Arrow's sort on the strings
themselves, then dictionary encoding (what the writer did before the codes)."""

import random

import pyarrow as pa
import pytest

from recorders.writer import _plain, _sorted_encoded

SCHEMA = pa.schema([("role", pa.dictionary(pa.int32(), pa.string())), ("name", pa.dictionary(pa.int32(), pa.string())),
                    ("key", pa.dictionary(pa.int32(), pa.string())), ("step", pa.int64()), ("value", pa.float64())])
KEYS = ["role", "name", "key", "step"]


def _reference(table: pa.Table) -> pa.Table:
    table = table.cast(pa.schema([(f.name, _plain(f.type)) for f in SCHEMA]))
    table = table.sort_by([(k, "ascending") for k in KEYS])
    return pa.Table.from_arrays([col.dictionary_encode().cast(f.type) if pa.types.is_dictionary(f.type) else col
                                 for col, f in zip(table.columns, SCHEMA)], schema=SCHEMA)


def _table(rng: random.Random, rows: int, null_share: float) -> pa.Table:
    def text(choices):
        return [None if rng.random() < null_share else rng.choice(choices) for _ in range(rows)]
    return pa.table({"role": text(["grad", "param", "activation", "Éta", "b"]),
                     "name": text(["fc1.weight", "fc1.bias", "fc10.weight", "fc2", "é", "z", ""]),
                     "key": text(["exp_avg", "exp_avg_sq"]),
                     "step": [rng.randrange(5) for _ in range(rows)],
                     "value": [float(i) for i in range(rows)]})


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("null_share", [0.0, 0.2, 1.0])
def test_the_sort_on_codes_gives_arrows_order_and_dictionaries(seed, null_share):
    rng = random.Random(seed)
    table = _table(rng, rng.choice([0, 1, 7, 300]), null_share)
    ours, reference = _sorted_encoded(table, SCHEMA, KEYS), _reference(table)
    assert ours.equals(reference)
    for name in ("role", "name", "key"):  # same dictionaries, same order, not only same values
        ours_chunk = ours.column(name).combine_chunks()
        reference_chunk = reference.column(name).combine_chunks()
        assert ours_chunk.dictionary.equals(reference_chunk.dictionary)
        assert ours_chunk.indices.equals(reference_chunk.indices)
