"""fa.features' Python face: the hashing settings (`Hasher`), the readers of VW's text format,
of CSV/TSV columns and of JSON lines, whole or streamed in chunks, the parsed arrays (`Features`) and
their cached binary form.

Every line is parsed and hashed in C (`fastad.features._featuriser`); Python runs once per
block of a megabyte, never per line."""
import csv
import json
import os

import numpy as np

from fastad.features._featuriser import Parser, hash_name
from fastad.io import write_atomically

#: Bytes read from the source at a time.
BLOCK = 1 << 20
#: The version of the cached binary form; a cache of another version is parsed again.
#: Format 1 had no fields (Features.fields): `load` reads it, with fields None.
CACHE_FORMAT = 2
_FORMATS = (1, CACHE_FORMAT)
#: featurise.h's column kinds (FA_COL_*).
_COLUMN_KINDS = {"label": 1, "weight": 2, "categorical": 3, "numeric": 4, "text": 5}
_ARRAYS = ("ids", "offsets", "values", "labels", "weights")


def _namespace_index(who, namespace):
    """The first byte of a namespace's name: VW's namespace index, which groups namespaces for
    n-grams and crosses."""
    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"{who}: a namespace is a non-empty string (its first character groups it, "
                         f"as VW's namespace index; ' ' is the default namespace), got {namespace!r}")
    first = namespace.encode("utf-8")[0]
    if first >= 0x80 or first in b"|: \t" and namespace != " ":
        raise ValueError(f"{who}: namespace {namespace!r} must start with an ASCII character other "
                         f"than '|', ':' and whitespace (' ' alone is the default namespace)")
    return first


def _per_namespace(who, table, low):
    """{namespace index: n} of an {namespace: n} table, or of an int n for every namespace."""
    if table is None:
        return {}
    if isinstance(table, (int, np.integer)) and not isinstance(table, bool):
        if not low <= table <= 255:
            raise ValueError(f"Hasher: {who} must be an int in [{low}, 255], got {table!r}")
        return {index: int(table) for index in range(256)}
    if not hasattr(table, "items"):
        raise TypeError(f"Hasher: {who} must be an int or a dict {{namespace: n}}, got {type(table).__name__}")
    result = {}
    for namespace, n in table.items():
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not low <= n <= 255:
            raise ValueError(f"Hasher: {who}[{namespace!r}] must be an int in [{low}, 255], got {n!r}")
        result[_namespace_index(f"Hasher: {who}", namespace)] = int(n)
    return result


def _crosses(who, crosses, size):
    """[(index, ...)] of crosses given as strings of namespace first letters ("ab", VW's -q ab)
    or tuples of namespace names, as VW compiles them: a cross that repeats a namespace is
    sorted ("aba" is "aab"), and crosses that are permutations of each other are one, sorted
    ("-q ba -q ab" is "ab"), where the first of them stood."""
    if isinstance(crosses, str):
        raise TypeError(f"Hasher: {who} is a list of crosses (['ab', ...]), got the string {crosses!r}")
    given = []
    for cross in crosses:
        if len(cross) != size:
            raise ValueError(f"Hasher: each of {who} crosses {size} namespaces, got {cross!r}")
        given.append(tuple(_namespace_index(f"Hasher: {who}", namespace) for namespace in cross))
    permutations = {}
    for cross in given:
        permutations[tuple(sorted(cross))] = permutations.get(tuple(sorted(cross)), 0) + 1
    result = []
    for cross in given:
        key = tuple(sorted(cross))
        if permutations[key] > 1 or len(set(cross)) < size:
            cross = key
        if cross not in result and key not in result:
            result.append(cross)
    return result


class Hasher:
    """How fa.features hashes features, as Vowpal Wabbit does.

    bits         ids are masked to `bits` bits (VW's -b): ids in [0, 2**bits); 1..32
    quadratic    crosses of two namespaces (VW's -q): ["ab", "aa"], each namespace named by its
                 first character (VW's namespace index), or [("words", "site")]
    cubic        crosses of three (VW's --cubic): ["abc"]
    ngram        n-grams within a namespace (VW's --ngram): {"w": 2}, or an int for all
    skips        skip-grams with them (VW's --skips): {"w": 1}, or an int for all
    char_ngrams  {"n": 3}: each word of namespace n becomes the character 3-grams of
                 "<word>" (the whole "<word>" when shorter), hashed as features of n (so a VW
                 line `|n <jo joh ohn hn>` gives the same ids)
    constant     VW's constant feature in every bag (its --noconstant is constant=False)

    `hash(feature, namespace)` is one feature's id.

    >>> hasher = fa.features.Hasher(bits=20, quadratic=["ab"], char_ngrams={"n": 3})
    >>> hasher.hash("price", "item")
    """

    def __init__(self, bits=18, *, quadratic=(), cubic=(), ngram=None, skips=None, char_ngrams=None,
                 constant=True):
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 1 <= bits <= 32:
            raise ValueError(f"Hasher: bits must be an int in [1, 32], got {bits!r}")
        self.bits = int(bits)
        self.constant = bool(constant)
        self._ngram = _per_namespace("ngram", ngram, 1)
        self._skips = _per_namespace("skips", skips, 0)
        self._char_ngrams = _per_namespace("char_ngrams", char_ngrams, 1)
        self._quadratic = _crosses("quadratic", quadratic, 2)
        self._cubic = _crosses("cubic", cubic, 3)
        self.quadratic, self.cubic = ([c if isinstance(c, str) else list(c) for c in crosses]
                                      for crosses in (quadratic, cubic))
        self.ngram, self.skips, self.char_ngrams = (
            None if table is None else int(table) if isinstance(table, (int, np.integer))
            else {namespace: int(n) for namespace, n in table.items()}
            for table in (ngram, skips, char_ngrams or {}))

    def settings(self):
        """The constructor's arguments as JSON values: `Hasher(**h.settings())` hashes as h
        (a model saves its hasher so)."""
        return {"bits": self.bits, "quadratic": self.quadratic, "cubic": self.cubic, "ngram": self.ngram,
                "skips": self.skips, "char_ngrams": self.char_ngrams, "constant": self.constant}

    def _compiled(self):
        """The settings as the parser takes them, as JSON values (a cache records them)."""
        return {"bits": self.bits, "quadratic": self._quadratic, "cubic": self._cubic,
                "ngram": sorted(self._ngram.items()), "skips": sorted(self._skips.items()),
                "char_ngrams": sorted(self._char_ngrams.items()), "constant": self.constant}

    def hash(self, feature, namespace=" "):
        """The id of `feature` in `namespace` (' ', the default namespace): VW's hash of the
        name seeded with the namespace's, masked to `bits`."""
        channel = 0 if namespace == " " else hash_name(namespace)
        return hash_name(feature, channel) & ((1 << self.bits) - 1)

    def parser(self):
        """A new compiled Parser with these settings."""
        parser = Parser()
        parser.configure(self.bits, self.constant, self._ngram, self._skips, self._char_ngrams,
                         self._quadratic, self._cubic)
        return parser

    def __repr__(self):
        return "Hasher(" + ", ".join(f"{k}={v!r}" for k, v in self.settings().items()) + ")"


class Features:
    """Parsed, hashed examples as the samplers read them: bag r is
    ids[offsets[r]:offsets[r + 1]], with values[offsets[r]:offsets[r + 1]].

    ids      int32 (bits <= 31) or int64, in [0, 2**bits)
    offsets  int64, len(self) + 1 entries, offsets[0] = 0
    values   float32, one per id (the feature's value; a cross's, the product)
    labels   float32, one per example (NaN for a line without a label)
    weights  float32, the importance weights (1 where a line gives none)
    bits     the hasher's bits; skipped: the lines left out (on_error="skip")
    fields   uint8, one per id: its namespace's index (the first byte of the namespace's
             name, VW's; a cross's, its first namespace's; the constant feature's 128), the
             fields of a field-aware factorization machine; None when not given

    >>> fa.data.BagSampler(ids_leaf, offsets_leaf, f.ids, f.offsets, {label: f.labels})
    """

    def __init__(self, ids, offsets, values, labels, weights, bits, skipped=0, fields=None):
        self.ids, self.offsets, self.values, self.labels, self.weights = ids, offsets, values, labels, weights
        self.bits = bits
        self.skipped = skipped
        self.fields = fields

    def __len__(self):
        return len(self.labels)

    def __repr__(self):
        return (f"Features({len(self)} examples, {len(self.ids)} ids, bits={self.bits}, "
                f"skipped={self.skipped})")

    def save(self, path, key=None):
        """Write the arrays to `path` atomically (a .npz of plain arrays, read back by
        `fa.features.load` without pickle); `key`, JSON values a cache checks."""
        record = {"format": CACHE_FORMAT, "bits": self.bits, "skipped": self.skipped, "key": key}
        arrays = {name: getattr(self, name) for name in _ARRAYS}
        if self.fields is not None:
            arrays["fields"] = self.fields
        arrays["record"] = np.frombuffer(json.dumps(record).encode(), np.uint8)
        write_atomically(os.fspath(path), lambda f: np.savez(f, **arrays), "Features.save")


def load(path):
    """The Features saved at `path` (`Features.save`), read without pickle."""
    features, _ = _load(path)
    return features


def _load(path):
    with np.load(os.fspath(path), allow_pickle=False) as data:
        missing = [name for name in (*_ARRAYS, "record") if name not in data.files]
        if missing:
            raise ValueError(f"fa.features.load: {path} is not a saved Features (no {', '.join(missing)})")
        record = json.loads(data["record"].tobytes())
        if record.get("format") not in _FORMATS:
            raise ValueError(f"fa.features.load: {path} has format {record.get('format')!r}, "
                             f"this version reads {' and '.join(map(str, _FORMATS))}")
        arrays = [data[name] for name in _ARRAYS]
        fields = data["fields"] if "fields" in data.files else None
    key = record["key"] if record["format"] == CACHE_FORMAT else None       # an older cache: parse again
    return Features(*arrays, bits=record["bits"], skipped=record["skipped"], fields=fields), key


def _check(who, hasher, on_error, chunk):
    if hasher is None:
        hasher = Hasher()
    if not isinstance(hasher, Hasher):
        raise TypeError(f"{who}: hasher must be a fa.features.Hasher, got {type(hasher).__name__}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"{who}: on_error must be 'raise' or 'skip', got {on_error!r}")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1):
        raise ValueError(f"{who}: chunk must be a positive int (examples a chunk), got {chunk!r}")
    return hasher


def _open(who, source):
    """(binary file, its name for messages, whether to close it) of a path or a binary file."""
    if hasattr(source, "read"):
        return source, getattr(source, "name", "<stream>"), False
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"{who}: source must be a path or a binary file, got {type(source).__name__}")
    return open(source, "rb"), os.fspath(source), True


def _stream(hasher, parser, f, name, chunk, on_error, line):
    """Features of up to `chunk` examples at a time from binary file f, its lines numbered from
    `line`."""
    skip = on_error == "skip"
    limit = chunk or (1 << 62)
    carry = b""
    yielded = False
    skipped = 0
    while True:
        block = f.read(BLOCK)
        if isinstance(block, str):
            raise TypeError(f"fa.features: {name} is open in text mode; open it with 'rb'")
        final = not block
        data = carry + block if carry else block
        pos = 0
        while True:
            pos, line = parser.feed(data, pos, final, limit, line, skip, name)
            if parser.examples < limit:
                break
            *arrays, fields = parser.take()
            yield Features(*arrays, bits=hasher.bits, skipped=parser.skipped - skipped, fields=fields)
            skipped, yielded = parser.skipped, True
        carry = data[pos:]
        if final:
            break
    if parser.examples or not yielded:
        *arrays, fields = parser.take(last=True)
        yield Features(*arrays, bits=hasher.bits, skipped=parser.skipped - skipped, fields=fields)


def _cached(who, source, cache, key, parse):
    """parse() or, when `cache` holds the Features of the same source and settings, those;
    a new parse is written to `cache`."""
    if cache is None:
        return parse()
    if hasattr(source, "read"):
        raise ValueError(f"{who}: cache= needs the source as a path (its size and time key the cache)")
    stat = os.stat(source)
    key = dict(key, source=os.path.abspath(os.fspath(source)), size=stat.st_size, mtime_ns=stat.st_mtime_ns)
    key = json.loads(json.dumps(key))       # as it reads back
    if os.path.exists(cache):
        try:
            features, stored = _load(cache)
        except (ValueError, OSError):
            features, stored = None, None
        if stored == key:
            return features
    features = parse()
    features.save(cache, key)
    return features


def iter_vw(source, hasher=None, *, chunk=65536, on_error="raise"):
    """Features of Vowpal Wabbit's text format, `chunk` examples at a time.

    source    a path or a binary file of lines `label [importance] ['tag]|namespace[:value]
              feature[:value] ... |namespace ...` (VW's simple label: a line without a label
              gets NaN; a tag is read and dropped; blank lines are skipped)
    hasher    a fa.features.Hasher (default: Hasher(), VW's defaults: 18 bits, constant)
    on_error  "raise": a malformed line (a label or importance weight that is not a finite
              number, a negative importance weight, a feature `name:value` whose value is
              not a finite number, '|:' without a namespace name, invalid UTF-8, more than
              `label importance` before the first '|', no '|') raises ValueError naming the
              source, the line and the byte column (1-based); "skip": the line is left out and
              counted in each chunk's `skipped`

    Unlike VW, a bad line is an error (VW warns and reads NaN values as 0), and VW's
    `name:string` features are not read (their value is not a number).
    """
    hasher = _check("fa.features.iter_vw", hasher, on_error, chunk)
    f, name, close = _open("fa.features.iter_vw", source)
    try:
        yield from _stream(hasher, hasher.parser(), f, name, chunk, on_error, 1)
    finally:
        if close:
            f.close()


def read_vw(source, hasher=None, *, on_error="raise", cache=None):
    """All of `source`'s examples (VW's text format) as one Features; see iter_vw.

    cache  a path: the parsed features are written there (atomically, as Features.save) and,
           while the source's size and time and the hasher's settings stay the same, read
           from there instead of parsing (VW's -c)

    >>> f = fa.features.read_vw("train.vw", fa.features.Hasher(bits=21, quadratic=["ab"]))
    """
    hasher = _check("fa.features.read_vw", hasher, on_error, None)
    return _cached("fa.features.read_vw", source, cache,
                   {"reader": "vw", "hasher": hasher._compiled(), "on_error": on_error},
                   lambda: next(iter_vw(source, hasher, chunk=None, on_error=on_error)))


def _column_plan(who, hasher, names, label, weight, categorical, numeric, text):
    """The compiled parser's column lists: kinds, namespace indexes and hashes, feature hashes."""
    if len(set(names)) != len(names):
        duplicated = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"{who}: the columns {duplicated} are named more than once")
    kinds, indexes, channels, features = ([0] * len(names) for _ in range(4))
    position = {column: k for k, column in enumerate(names)}
    used = set()

    def place(column, kind, namespace=None):
        if column not in position:
            raise ValueError(f"{who}: no column {column!r} (the columns: {list(names)})")
        if column in used:
            raise ValueError(f"{who}: column {column!r} is given two roles")
        used.add(column)
        k = position[column]
        kinds[k] = _COLUMN_KINDS[kind]
        if namespace is not None:
            indexes[k] = _namespace_index(who, namespace)
            channels[k] = 0 if namespace == " " else hash_name(namespace)
            features[k] = hash_name(column, channels[k])

    if label is not None:
        place(label, "label")
    if weight is not None:
        place(weight, "weight")
    for kind, table in (("categorical", categorical), ("numeric", numeric), ("text", text)):
        if not hasattr(table, "items"):
            raise TypeError(f"{who}: {kind} must be a dict {{column: namespace}}, got {type(table).__name__}")
        for column, namespace in table.items():
            place(column, kind, namespace)
    return kinds, indexes, channels, features


def iter_csv(source, hasher=None, *, label=None, weight=None, categorical=None, numeric=None, text=None,
             delimiter=",", header=True, columns=None, chunk=65536, on_error="raise"):
    """Features of CSV/TSV columns, `chunk` examples at a time.

    source       a path or a binary file, one example a line (a field may be "quoted")
    label        the label column (float); weight: the importance weight column
    categorical  {column: namespace}: the field is a feature of the namespace (as VW's
                 `|namespace field`; an empty field, none)
    numeric      {column: namespace}: a feature named as the column, valued by the field
                 (VW's `|namespace column:field`; empty or 0, none)
    text         {column: namespace}: each whitespace-separated word a feature
    delimiter    one character: "," (CSV), "\\t" (TSV)
    header       the first line names the columns; else `columns` names them
    columns not named are not read. A line with more or fewer fields than the columns, a
    label, weight or numeric field that is not a finite number (a weight below 0), invalid
    UTF-8: ValueError naming the line and the column, or with on_error="skip" the line
    left out and counted.

    >>> for part in fa.features.iter_csv("clicks.tsv", hasher, label="click", delimiter="\\t",
    ...                                  categorical={"site": "s"}, numeric={"price": "p"}): ...
    """
    who = "fa.features.iter_csv"
    hasher = _check(who, hasher, on_error, chunk)
    if not isinstance(delimiter, str) or len(delimiter.encode()) != 1 or delimiter in '"\n\r':
        raise ValueError(f"{who}: delimiter must be one ASCII character other than a quote or newline, "
                         f"got {delimiter!r}")
    f, name, close = _open(who, source)
    try:
        line = 1
        if header:
            if columns is not None:
                raise ValueError(f"{who}: columns= names the columns of a file without a header; "
                                 f"this one has a header (header=True)")
            first = f.readline()
            if isinstance(first, str):
                raise TypeError(f"{who}: {name} is open in text mode; open it with 'rb'")
            try:
                names = next(csv.reader([first.decode("utf-8-sig").rstrip("\r\n")], delimiter=delimiter))
            except (UnicodeDecodeError, StopIteration) as e:
                raise ValueError(f"{name}: line 1 (the header): cannot read the column names ({e})") from None
            line = 2
        else:
            if columns is None:
                raise ValueError(f"{who}: a file without a header (header=False) needs columns=[names]")
            names = [str(c) for c in columns]
        parser = hasher.parser()
        plan = _column_plan(who, hasher, names, label, weight, categorical or {}, numeric or {}, text or {})
        parser.columns(tuple(names), *plan, delimiter)
        yield from _stream(hasher, parser, f, name, chunk, on_error, line)
    finally:
        if close:
            f.close()


def read_csv(source, hasher=None, *, label=None, weight=None, categorical=None, numeric=None, text=None,
             delimiter=",", header=True, columns=None, on_error="raise", cache=None):
    """All of `source`'s examples (CSV/TSV columns) as one Features; see iter_csv, and
    read_vw for `cache`."""
    who = "fa.features.read_csv"
    hasher = _check(who, hasher, on_error, None)
    settings = dict(label=label, weight=weight, categorical=categorical, numeric=numeric, text=text,
                    delimiter=delimiter, header=header, columns=columns)
    return _cached(who, source, cache, {"reader": "csv", "hasher": hasher._compiled(), "on_error": on_error,
                                        **{k: (list(v) if k == "columns" and v is not None else v)
                                           for k, v in settings.items()}},
                   lambda: next(iter_csv(source, hasher, chunk=None, on_error=on_error, **settings)))


def _json_keys(who, label, weight, categorical, numeric, text):
    """The keys a JSON-lines reader reads, in the order given (label, weight, then each
    table's)."""
    keys = [key for key in (label, weight) if key is not None]
    for kind, table in (("categorical", categorical), ("numeric", numeric), ("text", text)):
        if not hasattr(table, "items"):
            raise TypeError(f"{who}: {kind} must be a dict {{key: namespace}}, got {type(table).__name__}")
        keys.extend(table)
    if not keys:
        raise ValueError(f"{who}: name the keys to read (label=, weight=, categorical=, numeric=, text=)")
    if not all(isinstance(key, str) for key in keys):
        raise TypeError(f"{who}: a key is a string, got {[key for key in keys if not isinstance(key, str)][0]!r}")
    return list(dict.fromkeys(keys))        # a key of two roles: _column_plan names it


def iter_json(source, hasher=None, *, label=None, weight=None, categorical=None, numeric=None, text=None,
              chunk=65536, on_error="raise"):
    """Features of JSON lines (one object a line), `chunk` examples at a time; the columns
    are keys, read as iter_csv reads its columns.

    source       a path or a binary file, one JSON object a line: {"click": 1, "site": "a", ...}
    label        the label key (a number, or a string holding one); weight: the importance
                 weight's
    categorical  {key: namespace}: the value (a string, or a number or true/false as
                 written) is a feature of the namespace
    numeric      {key: namespace}: a feature named as the key, valued by the value
    text         {key: namespace}: each whitespace-separated word of the value a feature
    A key no argument names is skipped (any value, nested ones too); a named key missing or
    null gives nothing (a label NaN, an importance weight 1). A line that is not one JSON
    object, a named key given twice or holding an object or array, a label, weight or
    numeric value that is not a finite number (a weight below 0), invalid UTF-8: ValueError
    naming the line and the key, or with on_error="skip" the line left out and counted.
    Parsed in C, as the other readers.

    >>> f = fa.features.read_json("clicks.jsonl", hasher, label="click", categorical={"site": "s"})
    """
    who = "fa.features.iter_json"
    hasher = _check(who, hasher, on_error, chunk)
    keys = _json_keys(who, label, weight, categorical or {}, numeric or {}, text or {})
    f, name, close = _open(who, source)
    try:
        parser = hasher.parser()
        parser.keys(tuple(keys), *_column_plan(who, hasher, keys, label, weight, categorical or {},
                                               numeric or {}, text or {}))
        yield from _stream(hasher, parser, f, name, chunk, on_error, 1)
    finally:
        if close:
            f.close()


def read_json(source, hasher=None, *, label=None, weight=None, categorical=None, numeric=None, text=None,
              on_error="raise", cache=None):
    """All of `source`'s examples (JSON lines) as one Features; see iter_json, and read_vw
    for `cache`."""
    who = "fa.features.read_json"
    hasher = _check(who, hasher, on_error, None)
    settings = dict(label=label, weight=weight, categorical=categorical, numeric=numeric, text=text)
    return _cached(who, source, cache, {"reader": "json", "hasher": hasher._compiled(), "on_error": on_error,
                                        **settings},
                   lambda: next(iter_json(source, hasher, chunk=None, on_error=on_error, **settings)))
