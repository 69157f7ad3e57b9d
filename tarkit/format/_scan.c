/* tarkit.format._scan: the compiled fast path of tarkit's tar reader.
 *
 * It reads runs of ordinary members out of one read buffer: ustar, GNU or v7 headers of
 * regular files whose numeric fields are plain octal and whose unsigned checksum is right,
 * complete in the buffer. Anything else (extension headers, other member types, base-256
 * numbers, a checksum that does not add up, a zero block, a member cut by the end of the
 * buffer) it leaves where it is for the Python reader, which raises every error: the two
 * implementations cannot differ in what they refuse or in how they say it. Why C and how
 * it is chosen: tarkit/format/scanner.py.
 *
 * scan_members(buf, pos, base, out) -> pos
 *     Append a Member for each ordinary member from buf[pos:]; return where it stopped.
 * scan_samples(buf, pos, base, state, out) -> pos
 *     The same, grouped into samples by the key/field rule of samples.py: a finished sample
 *     is appended to ``out`` (its members still in ``buf``: a span, materialized on demand),
 *     and the sample still open when it stops is left in ``state`` with its members as
 *     Member objects, as the Python grouping keeps it. It stops before any member the
 *     grouping would skip, refuse or has to look at in Python (a key seen before, fields
 *     that may repeat, webdataset metadata, a name without a field).
 * span_members(span) -> list[Member]
 *     The members of a span sample.
 * span_data(span, index) -> bytes
 *     The data of one member of a span sample, without making the member objects.
 * span_data_all(span) -> list[bytes]
 *     The data of every member of a span sample, in order.
 * span_data_of(span, indices) -> list[bytes]
 *     The data of the members numbered indices, in that order, in one pass over the span.
 * span_sample(buf, base, source) -> Sample | None
 *     The one sample that buf (a shard index's span: bytes of a shard from offset base) is
 *     when it is a run of ordinary members of one key, with fields and nothing else: the
 *     sample the Python reader and grouping would give. None for anything else, which
 *     the Python code then reads (and refuses, naming what is wrong).
 * crc32(data, crc=0) -> int
 *     zlib's crc32, folded with carry-less multiplication where the processor has it
 *     (CRC32_ACCELERATED): a sample's span is checked against its index at memory speed.
 * span_extents(span) -> list[tuple[bytes, int, int]]
 *     Where the data of each member of a span sample lies, without copying it: the span's
 *     buffer, and the start and stop of the data in it.
 *
 * TARKIT_SCAN_PORTABLE builds it without the x86 and little-endian shortcuts (to test the
 * plain C that other machines run).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX */
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__) && defined(__x86_64__) && !defined(TARKIT_SCAN_PORTABLE)
#include <emmintrin.h>
#define SCAN_SSE2 1
#endif

#define BLOCK 512
#define NAME_MAX_BYTES (155 + 1 + 100) /* ustar prefix, '/', name */

#ifndef TARKIT_SCAN_SOURCE
#define TARKIT_SCAN_SOURCE "unknown"
#endif

/* Set once by init_member / init_sample with the Python classes and constants. */
static PyTypeObject *member_type = NULL;
static PyObject *file_kind = NULL;
static PyObject *data_start = NULL;
static PyObject *empty_str = NULL;
static PyTypeObject *sample_type = NULL;
enum { SLOT_KEY, SLOT_FIELDS, SLOT_MEMBERS, SLOT_SOURCE, SLOT_SPAN, SLOT_COUNT };
static const char *const sample_slot_names[SLOT_COUNT] = {"key", "fields", "_members", "source",
                                                          "span"};
static Py_ssize_t sample_offsets[SLOT_COUNT]; /* where Sample's slots are in an instance */

typedef struct {
    Py_ssize_t size;  /* data bytes */
    Py_ssize_t total; /* header block, data and padding */
    const unsigned char *name;
    Py_ssize_t name_len;
    const unsigned char *prefix;
    Py_ssize_t prefix_len;
} Header;

/* Byte classes of the numeric fields: octal digit, space, NUL, anything else. */
enum { DIGIT = 1, SPACE = 2, NUL = 4 };
static unsigned char byte_class[256];

static void
init_byte_class(void)
{
    for (int c = '0'; c <= '7'; c++)
        byte_class[c] = DIGIT;
    byte_class[' '] = SPACE;
    byte_class[0] = NUL;
}

/* A numeric field as the reader's fast path takes it: spaces, octal digits, then spaces
 * and NULs only. 0 for any other shape (base-256, stray bytes): the Python reader decides.
 * ``value`` may be NULL when only the shape matters. */
/* How many of the 8 bytes at p, from the first, are octal digits. */
static inline int
leading_digits(const unsigned char *p)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && \
    !defined(TARKIT_SCAN_PORTABLE)
    uint64_t word;
    memcpy(&word, p, 8);
    /* A digit byte XOR '0' is 0 to 7: its top five bits are clear. */
    uint64_t other = (word ^ 0x3030303030303030ULL) & 0xF8F8F8F8F8F8F8F8ULL;
    return other ? __builtin_ctzll(other) >> 3 : 8;
#else
    int n = 0;
    while (n < 8 && byte_class[p[n]] == DIGIT)
        n++;
    return n;
#endif
}

static int
octal_field(const unsigned char *field, int width, uint64_t *value, int *digits)
{
    int i = 0;
    while (i < width && byte_class[field[i]] == SPACE)
        i++;
    int first = i;
    if (width - i >= 8) {
        int n = leading_digits(field + i);
        i += n;
        if (n == 8)
            while (i < width && byte_class[field[i]] == DIGIT)
                i++;
    }
    else {
        while (i < width && byte_class[field[i]] == DIGIT)
            i++;
    }
    int last = i;
    while (i < width && byte_class[field[i]] & (SPACE | NUL))
        i++;
    if (i != width)
        return 0;
    if (value) {
        uint64_t v = 0;
        for (int k = first; k < last; k++)
            v = (v << 3) | (uint64_t)(field[k] - '0');
        *value = v;
    }
    *digits = last - first;
    return 1;
}

/* The unsigned byte sum of n bytes (n a multiple of 16). */
static uint32_t
byte_sum(const unsigned char *p, int n)
{
#if defined(SCAN_SSE2)
    __m128i zero = _mm_setzero_si128(), total = _mm_setzero_si128();
    for (int i = 0; i < n; i += 16)
        total = _mm_add_epi64(total, _mm_sad_epu8(_mm_loadu_si128((const __m128i *)(p + i)), zero));
    return (uint32_t)(_mm_cvtsi128_si64(total) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(total, total)));
#else
    uint32_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += p[i];
    return sum;
#endif
}

static const int numeric_fields[8][2] = {
    {100, 8}, {108, 8}, {116, 8}, {124, 12}, {136, 12}, {148, 8}, {329, 8}, {337, 8},
};
enum { FIELD_SIZE = 3, FIELD_CHKSUM = 5 };
static const unsigned char ustar_magic[8] = {'u', 's', 't', 'a', 'r', 0, '0', '0'};

/* Whether the block at h is an ordinary regular-file header; fills *out if so. */
static int
plain_header(const unsigned char *h, Header *out)
{
    uint64_t size, stored;
    int digits;
    unsigned char typeflag = h[156];
    if (typeflag != '0' && typeflag != '7' && typeflag != 0)
        return 0;
    for (int i = 0; i < 8; i++) {
        uint64_t *value = i == FIELD_SIZE ? &size : i == FIELD_CHKSUM ? &stored : NULL;
        if (!octal_field(h + numeric_fields[i][0], numeric_fields[i][1], value, &digits))
            return 0;
        if (i == FIELD_CHKSUM && digits == 0)
            return 0;
    }
    /* The unsigned byte sum with the checksum field read as eight spaces. */
    uint32_t sum = byte_sum(h, BLOCK) + 8 * ' ';
    for (int i = 148; i < 156; i++)
        sum -= h[i];
    if (sum != stored)
        return 0;
    Py_ssize_t name_len = (Py_ssize_t)strnlen((const char *)h, 100);
    Py_ssize_t prefix_len = 0;
    if (h[345]) {
        if (memcmp(h + 257, ustar_magic, 8) != 0)
            return 0;
        prefix_len = (Py_ssize_t)strnlen((const char *)h + 345, 155);
    }
    if (typeflag == 0) {
        /* An old-style directory is a NUL type flag and a name ending in '/'. */
        int slash_end = name_len ? h[name_len - 1] == '/' : prefix_len > 0;
        if (slash_end)
            return 0;
    }
    out->size = (Py_ssize_t)size;
    out->total = BLOCK + ((out->size + BLOCK - 1) & ~(Py_ssize_t)(BLOCK - 1));
    out->name = h;
    out->name_len = name_len;
    out->prefix = h + 345;
    out->prefix_len = prefix_len;
    return 1;
}

/* The member's path as raw bytes (prefix joined), into buf of NAME_MAX_BYTES. */
static Py_ssize_t
full_name(const Header *header, unsigned char *buf)
{
    if (!header->prefix_len) {
        memcpy(buf, header->name, (size_t)header->name_len);
        return header->name_len;
    }
    memcpy(buf, header->prefix, (size_t)header->prefix_len);
    buf[header->prefix_len] = '/';
    memcpy(buf + header->prefix_len + 1, header->name, (size_t)header->name_len);
    return header->prefix_len + 1 + header->name_len;
}

static PyObject *
decode(const unsigned char *s, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] & 0x80)
            return PyUnicode_DecodeUTF8((const char *)s, n, "surrogateescape");
    }
    PyObject *text = PyUnicode_New(n, 127);
    if (text)
        memcpy(PyUnicode_1BYTE_DATA(text), s, (size_t)n);
    return text;
}

/* Field names repeat from sample to sample: the last few are kept, to reuse their str. */
#define FIELD_CACHE 8
static PyObject *field_cache[FIELD_CACHE];
static int field_cache_next;

static PyObject *
decode_field(const unsigned char *s, Py_ssize_t n)
{
    for (int i = 0; i < FIELD_CACHE; i++) {
        PyObject *cached = field_cache[i];
        if (cached && PyUnicode_GET_LENGTH(cached) == n && PyUnicode_IS_ASCII(cached) &&
            memcmp(PyUnicode_1BYTE_DATA(cached), s, (size_t)n) == 0)
            return Py_NewRef(cached);
    }
    PyObject *field = decode(s, n);
    if (field && PyUnicode_IS_ASCII(field) && n <= 32) {
        Py_XSETREF(field_cache[field_cache_next], Py_NewRef(field));
        field_cache_next = (field_cache_next + 1) % FIELD_CACHE;
    }
    return field;
}

static PyObject *
new_member(PyObject *buf, Py_ssize_t pos, Py_ssize_t base, const Header *header)
{
    unsigned char path[NAME_MAX_BYTES];
    PyObject *name = decode(path, full_name(header, path));
    PyObject *size = PyLong_FromSsize_t(header->size);
    PyObject *offset = PyLong_FromSsize_t(base + pos);
    PyObject *raw = PyBytes_FromStringAndSize(PyBytes_AS_STRING(buf) + pos, header->total);
    PyObject *member = NULL;
    if (name && size && offset && raw)
        member = member_type->tp_alloc(member_type, 7);
    if (!member) {
        Py_XDECREF(name);
        Py_XDECREF(size);
        Py_XDECREF(offset);
        Py_XDECREF(raw);
        return NULL;
    }
    PyTuple_SET_ITEM(member, 0, name);
    PyTuple_SET_ITEM(member, 1, Py_NewRef(file_kind));
    PyTuple_SET_ITEM(member, 2, size);
    PyTuple_SET_ITEM(member, 3, offset);
    PyTuple_SET_ITEM(member, 4, raw);
    PyTuple_SET_ITEM(member, 5, Py_NewRef(data_start));
    PyTuple_SET_ITEM(member, 6, Py_NewRef(empty_str));
    return member;
}

/* Append item, a new reference (or NULL from the call that failed to make it), to list and
 * drop the reference: 0, or -1 with an exception set. */
static int
append_new(PyObject *list, PyObject *item)
{
    if (!item)
        return -1;
    int status = PyList_Append(list, item);
    Py_DECREF(item);
    return status;
}

/* The members of buf[start:stop], a run of ordinary members the scanner read before. */
static PyObject *
members_of(PyObject *buf, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t base)
{
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buf);
    PyObject *members = PyList_New(0);
    Header header;
    if (!members)
        return NULL;
    for (Py_ssize_t pos = start; pos < stop; pos += header.total) {
        if (stop - pos < BLOCK || !plain_header(data + pos, &header) ||
            header.total > stop - pos) {
            PyErr_SetString(PyExc_SystemError, "tarkit scanner: a span that is not members");
            Py_DECREF(members);
            return NULL;
        }
        if (append_new(members, new_member(buf, pos, base, &header)) < 0) {
            Py_DECREF(members);
            return NULL;
        }
    }
    return members;
}

static int
parse_position(PyObject *object, Py_ssize_t *value)
{
    *value = PyLong_AsSsize_t(object);
    return !(*value == -1 && PyErr_Occurred());
}

static PyObject *
scan_members(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t pos, base;
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "scan_members(buf: bytes, pos, base, out: list)");
        return NULL;
    }
    if (member_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tarkit scanner: init_member was not called");
        return NULL;
    }
    if (!parse_position(args[1], &pos) || !parse_position(args[2], &base))
        return NULL;
    PyObject *buf = args[0], *out = args[3];
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buf);
    Py_ssize_t len = PyBytes_GET_SIZE(buf);
    Header header;
    while (pos >= 0 && len - pos >= BLOCK && plain_header(data + pos, &header) &&
           header.total <= len - pos) {
        if (append_new(out, new_member(buf, pos, base, &header)) < 0)
            return NULL;
        pos += header.total;
    }
    return PyLong_FromSsize_t(pos);
}

static PyObject *
new_sample(PyObject *key, PyObject *fields, PyObject *members, PyObject *source, PyObject *span)
{
    PyObject *values[SLOT_COUNT] = {key, fields, members, source, span};
    PyObject *sample = sample_type->tp_alloc(sample_type, 0);
    if (!sample)
        return NULL;
    /* The slots of a new instance are empty: each gets its value, as __init__ would. */
    for (int i = 0; i < SLOT_COUNT; i++)
        *(PyObject **)((char *)sample + sample_offsets[i]) = Py_NewRef(values[i]);
    return sample;
}

/* Two ASCII fields ordered by length, then by their bytes ignoring ASCII case: 0 when they
 * are the same field. */
static int
order_fields(PyObject *a, PyObject *b)
{
    Py_ssize_t la = PyUnicode_GET_LENGTH(a), lb = PyUnicode_GET_LENGTH(b);
    if (la != lb)
        return la < lb ? -1 : 1;
    const unsigned char *sa = PyUnicode_1BYTE_DATA(a), *sb = PyUnicode_1BYTE_DATA(b);
    for (Py_ssize_t k = 0; k < la; k++) {
        int ca = Py_TOLOWER(sa[k]), cb = Py_TOLOWER(sb[k]);
        if (ca != cb)
            return ca - cb;
    }
    return 0;
}

static int
compare_fields(const void *x, const void *y)
{
    return order_fields(*(PyObject *const *)x, *(PyObject *const *)y);
}

/* Samples with more fields than this are checked by sorting, not pair by pair. */
#define FIELDS_PAIRWISE 16

/* 1 when the fields are distinct ignoring ASCII case; 0 when two may be the same field
 * (or one is not ASCII: then samples.py decides, with str.lower). Linear-logarithmic in
 * the number of fields: a sample may have many thousands. */
static int
fields_surely_distinct(PyObject *fields)
{
    Py_ssize_t n = PyList_GET_SIZE(fields);
    if (n == 1)
        return 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyList_GET_ITEM(fields, i);
        if (!PyUnicode_Check(a) || !PyUnicode_IS_ASCII(a))
            return 0;
    }
    if (n <= FIELDS_PAIRWISE) {
        for (Py_ssize_t i = 0; i < n; i++)
            for (Py_ssize_t j = i + 1; j < n; j++)
                if (order_fields(PyList_GET_ITEM(fields, i), PyList_GET_ITEM(fields, j)) == 0)
                    return 0;
        return 1;
    }
    PyObject **sorted = PyMem_Malloc((size_t)n * sizeof(PyObject *));
    if (!sorted)
        return 0; /* samples.py decides */
    for (Py_ssize_t i = 0; i < n; i++)
        sorted[i] = PyList_GET_ITEM(fields, i);
    qsort(sorted, (size_t)n, sizeof(PyObject *), compare_fields);
    int distinct = 1;
    for (Py_ssize_t i = 1; i < n && distinct; i++)
        distinct = order_fields(sorted[i - 1], sorted[i]) != 0;
    PyMem_Free(sorted);
    return distinct;
}

/* The grouping state shared with samples.py: the open sample and the keys seen. */
typedef struct {
    PyObject *key;     /* str, or None when no sample is open */
    PyObject *fields;  /* list of str */
    PyObject *members; /* list of Member, or NULL while the open sample is a span */
    PyObject *seen;    /* set of str */
    PyObject *source;
    /* The open sample's key as raw bytes, for comparing with each member's. */
    unsigned char key_buf[NAME_MAX_BYTES];
    PyObject *key_bytes; /* owns the bytes when the key came from Python */
    const unsigned char *key_raw;
    Py_ssize_t key_len;
    Py_ssize_t span_start, span_stop;
} Group;

static void
group_clear(Group *group)
{
    Py_CLEAR(group->key);
    Py_CLEAR(group->fields);
    Py_CLEAR(group->members);
    Py_CLEAR(group->seen);
    Py_CLEAR(group->source);
    Py_CLEAR(group->key_bytes);
}

static int
group_load(Group *group, PyObject *state)
{
    memset(group, 0, sizeof(*group));
    group->key = PyObject_GetAttrString(state, "key");
    group->fields = PyObject_GetAttrString(state, "fields");
    group->members = PyObject_GetAttrString(state, "members");
    group->seen = PyObject_GetAttrString(state, "seen");
    group->source = PyObject_GetAttrString(state, "source");
    if (!group->key || !group->fields || !group->members || !group->seen || !group->source)
        return -1;
    if (!PySet_Check(group->seen)) {
        PyErr_SetString(PyExc_TypeError, "tarkit scanner: state.seen is not a set");
        return -1;
    }
    if (group->key == Py_None)
        return 0;
    if (!PyUnicode_Check(group->key) || !PyList_Check(group->fields) ||
        !PyList_Check(group->members)) {
        PyErr_SetString(PyExc_TypeError, "tarkit scanner: a malformed open sample");
        return -1;
    }
    group->key_bytes = PyUnicode_AsEncodedString(group->key, "utf-8", "surrogateescape");
    if (!group->key_bytes)
        return -1;
    group->key_raw = (const unsigned char *)PyBytes_AS_STRING(group->key_bytes);
    group->key_len = PyBytes_GET_SIZE(group->key_bytes);
    return 0;
}

static PyObject *
span_of(PyObject *buf, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t base)
{
    PyObject *span = PyTuple_New(4);
    PyObject *numbers[3] = {PyLong_FromSsize_t(start), PyLong_FromSsize_t(stop),
                            PyLong_FromSsize_t(base)};
    if (!span || !numbers[0] || !numbers[1] || !numbers[2]) {
        Py_XDECREF(span);
        for (int i = 0; i < 3; i++)
            Py_XDECREF(numbers[i]);
        return NULL;
    }
    PyTuple_SET_ITEM(span, 0, Py_NewRef(buf));
    for (int i = 0; i < 3; i++)
        PyTuple_SET_ITEM(span, i + 1, numbers[i]);
    return span;
}

/* Close the open sample: a span sample when it was read here whole, else with its list. */
static PyObject *
group_sample(Group *group, PyObject *buf, Py_ssize_t base)
{
    if (group->members)
        return new_sample(group->key, group->fields, group->members, group->source, Py_None);
    PyObject *span = span_of(buf, group->span_start, group->span_stop, base);
    if (!span)
        return NULL;
    PyObject *sample = new_sample(group->key, group->fields, Py_None, group->source, span);
    Py_DECREF(span);
    return sample;
}

/* Leave the open sample in the state as samples.py keeps it: members as a list. */
static int
group_store(Group *group, PyObject *state, PyObject *buf, Py_ssize_t base)
{
    if (group->key != Py_None && group->members == NULL) {
        group->members = members_of(buf, group->span_start, group->span_stop, base);
        if (!group->members)
            return -1;
    }
    PyObject *members = group->members ? group->members : Py_None;
    if (PyObject_SetAttrString(state, "key", group->key) < 0 ||
        PyObject_SetAttrString(state, "fields", group->fields) < 0 ||
        PyObject_SetAttrString(state, "members", members) < 0)
        return -1;
    return 0;
}

/* One member of the open sample; 0 on success. */
static int
group_extend(Group *group, PyObject *buf, Py_ssize_t pos, Py_ssize_t base, const Header *header,
             const unsigned char *path, Py_ssize_t path_len, Py_ssize_t dot)
{
    if (append_new(group->fields, decode_field(path + dot + 1, path_len - dot - 1)) < 0)
        return -1;
    if (group->members == NULL) {
        group->span_stop = pos + header->total;
        return 0;
    }
    return append_new(group->members, new_member(buf, pos, base, header));
}

/* Start a sample (a span) with this member, whose key is new. */
static int
group_open(Group *group, PyObject *key, Py_ssize_t pos, const Header *header,
           const unsigned char *path, Py_ssize_t path_len, Py_ssize_t dot)
{
    PyObject *field = decode_field(path + dot + 1, path_len - dot - 1);
    if (!field)
        return -1;
    PyObject *fields = PyList_New(1);
    if (!fields) {
        Py_DECREF(field);
        return -1;
    }
    PyList_SET_ITEM(fields, 0, field);
    Py_SETREF(group->key, Py_NewRef(key));
    Py_SETREF(group->fields, fields);
    Py_CLEAR(group->members);
    Py_CLEAR(group->key_bytes);
    memcpy(group->key_buf, path, (size_t)dot);
    group->key_raw = group->key_buf;
    group->key_len = dot;
    group->span_start = pos;
    group->span_stop = pos + header->total;
    return 0;
}

/* Where the key of a sample member's path ends (the dot before its field), by the rule of
 * samples.py; -1 for a path the Python grouping must look at: perhaps webdataset metadata
 * (a leading "__"), or a file name without a field. */
static Py_ssize_t
field_dot(const unsigned char *path, Py_ssize_t path_len)
{
    if (path_len >= 2 && path[0] == '_' && path[1] == '_')
        return -1;
    Py_ssize_t slash = 0;
    for (Py_ssize_t i = path_len - 1; i >= 0; i--) {
        if (path[i] == '/') {
            slash = i + 1;
            break;
        }
    }
    const unsigned char *found = memchr(path + slash, '.', (size_t)(path_len - slash));
    if (!found || found - path <= slash)
        return -1;
    return found - path;
}

static PyObject *
scan_samples(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t pos, base;
    Group group;
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "scan_samples(buf: bytes, pos, base, state, out: list)");
        return NULL;
    }
    if (member_type == NULL || sample_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tarkit scanner: init_sample was not called");
        return NULL;
    }
    if (!parse_position(args[1], &pos) || !parse_position(args[2], &base))
        return NULL;
    PyObject *buf = args[0], *state = args[3], *out = args[4];
    if (group_load(&group, state) < 0)
        goto error;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buf);
    Py_ssize_t len = PyBytes_GET_SIZE(buf);
    Header header;
    unsigned char path[NAME_MAX_BYTES];
    while (pos >= 0 && len - pos >= BLOCK && plain_header(data + pos, &header) &&
           header.total <= len - pos) {
        Py_ssize_t path_len = full_name(&header, path);
        Py_ssize_t dot = field_dot(path, path_len);
        if (dot < 0)
            break; /* metadata, or no field: samples.py decides */
        if (group.key != Py_None && dot == group.key_len &&
            memcmp(path, group.key_raw, (size_t)dot) == 0) {
            if (group_extend(&group, buf, pos, base, &header, path, path_len, dot) < 0)
                goto error;
            pos += header.total;
            continue;
        }
        PyObject *key = decode(path, dot);
        if (!key)
            goto error;
        int seen = PySet_Contains(group.seen, key);
        if (seen != 0) {
            Py_DECREF(key);
            if (seen < 0)
                goto error;
            break; /* a key that comes back: samples.py says so */
        }
        if (group.key != Py_None) {
            if (!fields_surely_distinct(group.fields)) {
                Py_DECREF(key);
                break;
            }
            if (append_new(out, group_sample(&group, buf, base)) < 0) {
                Py_DECREF(key);
                goto error;
            }
        }
        if (PySet_Add(group.seen, key) < 0 ||
            group_open(&group, key, pos, &header, path, path_len, dot) < 0) {
            Py_DECREF(key);
            goto error;
        }
        Py_DECREF(key);
        pos += header.total;
    }
    if (group_store(&group, state, buf, base) < 0)
        goto error;
    group_clear(&group);
    return PyLong_FromSsize_t(pos);
error:
    group_clear(&group);
    return NULL;
}

static PyObject *
span_members(PyObject *module, PyObject *span)
{
    PyObject *buf;
    Py_ssize_t start, stop, base;
    if (member_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tarkit scanner: init_member was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(span, "O!nnn", &PyBytes_Type, &buf, &start, &stop, &base))
        return NULL;
    if (start < 0 || stop > PyBytes_GET_SIZE(buf) || start > stop) {
        PyErr_SetString(PyExc_ValueError, "tarkit scanner: a span outside its buffer");
        return NULL;
    }
    return members_of(buf, start, stop, base);
}

/* The span tuple's buffer and bounds, checked; 0 with an exception set if unusable. */
static int
span_bounds(PyObject *span, const char *usage, PyObject **buf, Py_ssize_t *start, Py_ssize_t *stop)
{
    if (!PyTuple_Check(span) || PyTuple_GET_SIZE(span) != 4 ||
        !PyBytes_Check(PyTuple_GET_ITEM(span, 0))) {
        PyErr_SetString(PyExc_TypeError, usage);
        return 0;
    }
    *buf = PyTuple_GET_ITEM(span, 0);
    if (!parse_position(PyTuple_GET_ITEM(span, 1), start) ||
        !parse_position(PyTuple_GET_ITEM(span, 2), stop))
        return 0;
    if (*start < 0 || *stop > PyBytes_GET_SIZE(*buf) || *start > *stop) {
        PyErr_SetString(PyExc_ValueError, "tarkit scanner: a span outside its buffer");
        return 0;
    }
    return 1;
}

/* The next member of a span at pos: its data size and total bytes; 0 past the last. The
 * scanner checked these headers: only their sizes are read again. */
static int
span_next(const unsigned char *data, Py_ssize_t pos, Py_ssize_t stop, Header *header)
{
    uint64_t size;
    int digits;
    if (pos > stop - BLOCK || !octal_field(data + pos + 124, 12, &size, &digits))
        return 0;
    header->size = (Py_ssize_t)size;
    header->total = BLOCK + ((header->size + BLOCK - 1) & ~(Py_ssize_t)(BLOCK - 1));
    return header->total <= stop - pos;
}

static PyObject *
span_data(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    const char *usage = "span_data(span, index)";
    Py_ssize_t start, stop, index;
    PyObject *buf;
    Header header;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    if (!span_bounds(args[0], usage, &buf, &start, &stop) || !parse_position(args[1], &index))
        return NULL;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buf);
    for (Py_ssize_t pos = start; index >= 0 && span_next(data, pos, stop, &header);
         pos += header.total) {
        if (index-- == 0)
            return PyBytes_FromStringAndSize((const char *)data + pos + BLOCK, header.size);
    }
    PyErr_SetString(PyExc_IndexError, "tarkit scanner: no such member in the span");
    return NULL;
}

/* What a list of a span's members holds for each: made from the buffer object, its bytes,
 * and the member's header at pos. A new reference, or NULL with an exception set. */
typedef PyObject *(*span_item)(PyObject *buf, const unsigned char *data, Py_ssize_t pos,
                               const Header *header);

/* One item for each member of the span args[0], in order. */
static PyObject *
span_list(PyObject *const *args, Py_ssize_t nargs, const char *usage, span_item item)
{
    Py_ssize_t start, stop;
    PyObject *buf;
    Header header;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    if (!span_bounds(args[0], usage, &buf, &start, &stop))
        return NULL;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buf);
    PyObject *result = PyList_New(0);
    if (!result)
        return NULL;
    for (Py_ssize_t pos = start; span_next(data, pos, stop, &header); pos += header.total) {
        if (append_new(result, item(buf, data, pos, &header)) < 0) {
            Py_DECREF(result);
            return NULL;
        }
    }
    return result;
}

/* The sample a span is, when it is one run of ordinary members of one key (see the module
 * comment); None for anything the Python reader must look at. */
static PyObject *
span_sample(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t base, pos = 0, key_len = -1;
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyUnicode_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "span_sample(buf: bytes, base, source: str)");
        return NULL;
    }
    if (member_type == NULL || sample_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tarkit scanner: init_sample was not called");
        return NULL;
    }
    if (!parse_position(args[1], &base))
        return NULL;
    PyObject *buf = args[0];
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buf);
    Py_ssize_t len = PyBytes_GET_SIZE(buf);
    unsigned char path[NAME_MAX_BYTES], key[NAME_MAX_BYTES];
    Header header;
    PyObject *fields = PyList_New(0);
    if (!fields)
        return NULL;
    while (pos < len) {
        if (len - pos < BLOCK || !plain_header(data + pos, &header) || header.total > len - pos)
            goto other;
        Py_ssize_t path_len = full_name(&header, path);
        Py_ssize_t dot = field_dot(path, path_len);
        if (dot < 0)
            goto other; /* metadata, or no field */
        if (key_len < 0) {
            memcpy(key, path, (size_t)dot);
            key_len = dot;
        }
        else if (dot != key_len || memcmp(path, key, (size_t)dot) != 0)
            goto other; /* another key */
        if (append_new(fields, decode_field(path + dot + 1, path_len - dot - 1)) < 0) {
            Py_DECREF(fields);
            return NULL;
        }
        pos += header.total;
    }
    if (key_len < 0 || !fields_surely_distinct(fields))
        goto other;
    PyObject *key_str = decode(key, key_len);
    PyObject *span = key_str ? span_of(buf, 0, len, base) : NULL;
    PyObject *sample = span ? new_sample(key_str, fields, Py_None, args[2], span) : NULL;
    Py_XDECREF(key_str);
    Py_XDECREF(span);
    Py_DECREF(fields);
    return sample;
other:
    Py_DECREF(fields);
    Py_RETURN_NONE;
}

/* crc32 (zlib's: reflected polynomial 0xEDB88320), a byte at a time for short tails and
 * machines without carry-less multiplication, else 64 bytes at a time by folding (Gopal,
 * Ozturk et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction", Intel, 2009; the constants are those of its bit-reflected CRC-32). */
static uint32_t crc_table[256];

static void
init_crc_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

/* reg: the register (the crc before its final inversion). */
static uint32_t
crc_bytes(uint32_t reg, const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        reg = crc_table[(reg ^ p[i]) & 0xFF] ^ (reg >> 8);
    return reg;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(TARKIT_SCAN_PORTABLE)
#include <immintrin.h>
#define SCAN_CLMUL 1

/* The register after n bytes (n ≥ 64, a multiple of 16) from register reg. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t
crc_folded(uint32_t reg, const unsigned char *p, Py_ssize_t n)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    __m128i x0, x5, x6, x7, x8;
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)reg));
    p += 64;
    n -= 64;
    while (n >= 64) { /* four lanes of 128 bits folded 512 bits forward */
        x5 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        x6 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        x7 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        x8 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(p + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(p + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(p + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(p + 0x30)));
        p += 64;
        n -= 64;
    }
    /* The four lanes into one, then 128 bits at a time. */
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x4), x5);
    while (n >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)p);
        x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), x5);
        p += 16;
        n -= 16;
    }
    /* 128 bits to 64, then Barrett's reduction to 32. */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k5, 0x00), x2);
    x0 = _mm_and_si128(x1, mask32);
    x0 = _mm_clmulepi64_si128(x0, poly, 0x10);
    x0 = _mm_and_si128(x0, mask32);
    x0 = _mm_clmulepi64_si128(x0, poly, 0x00);
    x1 = _mm_xor_si128(x1, x0);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static int crc_accelerated;

static PyObject *
crc32(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    unsigned long long start = 0;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32(data, crc=0)");
        return NULL;
    }
    if (nargs == 2) {
        start = PyLong_AsUnsignedLongLongMask(args[1]);
        if (start == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t n = view.len;
    uint32_t reg = ~(uint32_t)start;
    /* Other threads run meanwhile only for long data: taking the lock back can wait for
     * another thread's switch interval, far longer than a sample's few microseconds. */
    PyThreadState *released = n >= (1 << 20) ? PyEval_SaveThread() : NULL;
#if defined(SCAN_CLMUL)
    if (crc_accelerated && n >= 64) {
        Py_ssize_t folded = n & ~(Py_ssize_t)15;
        reg = crc_folded(reg, p, folded);
        p += folded;
        n -= folded;
    }
#endif
    reg = crc_bytes(reg, p, n);
    if (released)
        PyEval_RestoreThread(released);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(~reg);
}

static PyObject *
span_data_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    const char *usage = "span_data_of(span, indices)";
    Py_ssize_t start, stop, count = 0;
    PyObject *buf;
    Header header;
    if (nargs != 2 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    if (!span_bounds(args[0], usage, &buf, &start, &stop))
        return NULL;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buf);
    /* Where each member starts (its header), found in one pass. */
    for (Py_ssize_t pos = start; span_next(data, pos, stop, &header); pos += header.total)
        count++;
    Py_ssize_t *starts = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(Py_ssize_t));
    if (!starts)
        return PyErr_NoMemory();
    count = 0;
    for (Py_ssize_t pos = start; span_next(data, pos, stop, &header); pos += header.total)
        starts[count++] = pos;
    PyObject *indices = args[1];
    PyObject *result = PyList_New(0);
    for (Py_ssize_t i = 0; result && i < PyList_GET_SIZE(indices); i++) {
        Py_ssize_t index;
        if (!parse_position(PyList_GET_ITEM(indices, i), &index))
            Py_CLEAR(result);
        else if (index < 0 || index >= count) {
            PyErr_SetString(PyExc_IndexError, "tarkit scanner: no such member in the span");
            Py_CLEAR(result);
        }
        else {
            span_next(data, starts[index], stop, &header);
            PyObject *item = PyBytes_FromStringAndSize(
                (const char *)data + starts[index] + BLOCK, header.size);
            if (append_new(result, item) < 0)
                Py_CLEAR(result);
        }
    }
    PyMem_Free(starts);
    return result;
}

static PyObject *
member_data(PyObject *buf, const unsigned char *data, Py_ssize_t pos, const Header *header)
{
    return PyBytes_FromStringAndSize((const char *)data + pos + BLOCK, header->size);
}

static PyObject *
span_data_all(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return span_list(args, nargs, "span_data_all(span)", member_data);
}

/* (buffer, start, stop) of a member's data. */
static PyObject *
member_extent(PyObject *buf, const unsigned char *data, Py_ssize_t pos, const Header *header)
{
    PyObject *item = PyTuple_New(3);
    PyObject *first = PyLong_FromSsize_t(pos + BLOCK);
    PyObject *last = PyLong_FromSsize_t(pos + BLOCK + header->size);
    if (!item || !first || !last) {
        Py_XDECREF(item);
        Py_XDECREF(first);
        Py_XDECREF(last);
        return NULL;
    }
    PyTuple_SET_ITEM(item, 0, Py_NewRef(buf));
    PyTuple_SET_ITEM(item, 1, first);
    PyTuple_SET_ITEM(item, 2, last);
    return item;
}

static PyObject *
span_extents(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return span_list(args, nargs, "span_extents(span)", member_extent);
}

static PyObject *
init_member(PyObject *module, PyObject *args)
{
    PyObject *type, *kind;
    if (!PyArg_ParseTuple(args, "O!U", &PyType_Type, &type, &kind))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "Member must be a tuple subclass");
        return NULL;
    }
    Py_XSETREF(member_type, (PyTypeObject *)Py_NewRef(type));
    Py_XSETREF(file_kind, Py_NewRef(kind));
    if (!data_start && !(data_start = PyLong_FromLong(BLOCK)))
        return NULL;
    if (!empty_str && !(empty_str = PyUnicode_New(0, 0)))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
init_sample(PyObject *module, PyObject *type)
{
    Py_ssize_t offsets[SLOT_COUNT];
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "init_sample(Sample)");
        return NULL;
    }
    for (int i = 0; i < SLOT_COUNT; i++) {
        /* Each field must be an object __slots__ member of the class itself. */
        PyObject *descr = PyDict_GetItemString(((PyTypeObject *)type)->tp_dict,
                                               sample_slot_names[i]);
        if (!descr || !Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "Sample has no slot %s", sample_slot_names[i]);
            return NULL;
        }
        offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    memcpy(sample_offsets, offsets, sizeof(offsets));
    Py_XSETREF(sample_type, (PyTypeObject *)Py_NewRef(type));
    Py_RETURN_NONE;
}

static PyMethodDef scan_methods[] = {
    {"scan_members", (PyCFunction)(void (*)(void))scan_members, METH_FASTCALL,
     "scan_members(buf, pos, base, out) -> pos: append the ordinary members from buf[pos:]."},
    {"scan_samples", (PyCFunction)(void (*)(void))scan_samples, METH_FASTCALL,
     "scan_samples(buf, pos, base, state, out) -> pos: the same, grouped into samples."},
    {"span_members", span_members, METH_O, "span_members(span) -> the members of a span sample."},
    {"span_data", (PyCFunction)(void (*)(void))span_data, METH_FASTCALL,
     "span_data(span, index) -> the data of the index-th member of a span sample."},
    {"span_data_all", (PyCFunction)(void (*)(void))span_data_all, METH_FASTCALL,
     "span_data_all(span) -> the data of every member of a span sample, in order."},
    {"span_data_of", (PyCFunction)(void (*)(void))span_data_of, METH_FASTCALL,
     "span_data_of(span, indices) -> the data of the members numbered indices, in order."},
    {"span_sample", (PyCFunction)(void (*)(void))span_sample, METH_FASTCALL,
     "span_sample(buf, base, source) -> the one sample of an index's span, or None."},
    {"crc32", (PyCFunction)(void (*)(void))crc32, METH_FASTCALL,
     "crc32(data, crc=0) -> zlib's crc32 of data, continuing crc."},
    {"span_extents", (PyCFunction)(void (*)(void))span_extents, METH_FASTCALL,
     "span_extents(span) -> (buffer, start, stop) of each member's data."},
    {"init_member", init_member, METH_VARARGS, "init_member(Member, FILE)"},
    {"init_sample", init_sample, METH_O, "init_sample(Sample)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_scan",
    .m_doc = "The compiled fast path of tarkit's tar reader.",
    .m_size = -1,
    .m_methods = scan_methods,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
    init_byte_class();
    init_crc_table();
#if defined(SCAN_CLMUL)
    __builtin_cpu_init();
    crc_accelerated = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    PyObject *module = PyModule_Create(&scan_module);
    if (module && (PyModule_AddStringConstant(module, "SOURCE_HASH", TARKIT_SCAN_SOURCE) < 0 ||
                   PyModule_AddIntConstant(module, "CRC32_ACCELERATED", crc_accelerated) < 0)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
