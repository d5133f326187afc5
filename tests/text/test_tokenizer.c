/* SPDX-License-Identifier: MIT */
/* Unit tests of the byte-level BPE tokenizer (text/tokenizer.c) with the Qwen3 and GPT-2 files
 * in data/tokenizers: ids of a short text and vocabulary facts against values printed by Python
 * `tokenizers` 0.23 (the reference), round trips decode(encode(x)) == x for arbitrary bytes
 * (invalid UTF-8 included), emoji and CJK, added tokens inside text, empty input, NFC ("e\u0301"
 * encodes as "\u00e9" under Qwen3's NFC, not under GPT-2), and malformed tokenizer files, each of
 * which must be rejected with the right error code.  The full comparison with `tokenizers` on
 * megabytes of text is tests/text/test_tokenize_hf.py. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "text/tokenizer.h"
#include "tests/lib/sdp_test.h"
#include "tests/lib/sdp_test_files.h"

/* encode then decode; 1 when the bytes come back unchanged */
static int round_trip(sdp_tok_t *t, const char *s, size_t len)
{
    uint32_t *ids;
    size_t n, dlen;
    char *back;
    if (sdp_tok_encode(t, s, len, &ids, &n))
        return 0;
    int ok = !sdp_tok_decode(t, ids, n, &back, &dlen) && dlen == len && !memcmp(back, s, len);
    free(ids);
    free(back);
    return ok;
}

static int ids_equal(sdp_tok_t *t, const char *a, const char *b)
{
    uint32_t *x, *y;
    size_t nx, ny;
    if (sdp_tok_encode(t, a, strlen(a), &x, &nx) || sdp_tok_encode(t, b, strlen(b), &y, &ny))
        return -1;
    int eq = nx == ny && !memcmp(x, y, nx * sizeof(*x));
    free(x);
    free(y);
    return eq;
}

/* ids of s must be exactly want[0..nwant) */
static void check_ids(sdp_tok_t *t, const char *name, const char *s, const uint32_t *want,
                      size_t nwant)
{
    uint32_t *ids;
    size_t n;
    int rc = sdp_tok_encode(t, s, strlen(s), &ids, &n);
    int ok = !rc && n == nwant && !memcmp(ids, want, n * sizeof(*ids));
    printf("  %s \"%s\": %zu ids%s\n", name, s, n, ok ? ", as tokenizers" : "");
    CHECK(ok, "%s: ids of \"%s\" differ from tokenizers'", name, s);
    if (!rc)
        free(ids);
}

static void test_common(sdp_tok_t *t, const char *name, int nfc)
{
    struct sdp_rng rng = { 42 };
    uint32_t *ids = (uint32_t *)1;
    size_t n = 99;
    char buf[4096];

    int rc = sdp_tok_encode(t, "", 0, &ids, &n);
    CHECK(!rc && n == 0 && !ids, "%s: empty input gives %zu ids (rc %d)", name, n, rc);

    int bad = 0;
    for (int b = 0; b < 256; b++) {
        buf[0] = (char)b;
        bad += !round_trip(t, buf, 1);
    }
    CHECK(!bad, "%s: %d of the 256 single bytes do not round-trip", name, bad);

    /* random bytes: mostly invalid UTF-8, NUL bytes included.  With an NFC normalizer, valid
     * sequences that happen to form combining marks may change, so there the lead bytes
     * 0xCC..0xF4 (U+0300 and up) are turned into continuation bytes: still invalid UTF-8 galore,
     * but nothing NFC can alter.  Whatever the bytes, decoding must then be a fixed point. */
    bad = 0;
    int unstable = 0;
    for (int k = 0; k < 200; k++) {
        size_t len = 1 + sdp_rng_next(&rng) % sizeof(buf);
        for (size_t i = 0; i < len; i++) {
            unsigned char b = (unsigned char)sdp_rng_next(&rng);
            buf[i] = (char)(nfc && b >= 0xcc && b <= 0xf4 ? b ^ 0x40 : b);
        }
        bad += !round_trip(t, buf, len);
        for (size_t i = 0; i < len; i++)
            buf[i] = (char)sdp_rng_next(&rng);
        uint32_t *rids = NULL;
        size_t n1, dlen;
        char *back = NULL;
        if (!sdp_tok_encode(t, buf, len, &rids, &n1) && !sdp_tok_decode(t, rids, n1, &back, &dlen))
            unstable += !round_trip(t, back, dlen);
        else
            unstable++;
        free(rids);
        free(back);
    }
    CHECK(!bad, "%s: %d of 200 random byte strings do not round-trip", name, bad);
    CHECK(!unstable, "%s: %d of 200 decoded random byte strings do not round-trip", name, unstable);

    static const char *const texts[] = {
        "Hello, world! It's 2024; naïve café, 日本語のテキスト、中文 한국어 "
        "🤗👨‍👩‍👧 "
        "🇯🇵",
        "  leading and trailing spaces  \n\n\r\n\ttabs\t\t",
        "<|endoftext|>text between<|endoftext|><|endoftext|> <|endoftext| <|end",
        "\xff\xfe invalid \xc3\x28 utf-8 \xe2\x82 truncated \xf0\x9f\x98",
        "x\xcc", /* a lone lead byte of a combining mark: not NFC-normalized, kept */
    };
    bad = 0;
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        bad += !round_trip(t, texts[i], strlen(texts[i]));
    CHECK(!bad, "%s: %d of %zu edge-case texts do not round-trip", name, bad,
          sizeof(texts) / sizeof(texts[0]));

    /* random valid UTF-8 from NFC-stable blocks (ASCII, CJK, Hangul syllables, emoji) */
    static const uint32_t lo[] = { 0x20, 0x4e00, 0xac00, 0x1f300 },
                          hi[] = { 0x7e, 0x9fa5, 0xd7a3, 0x1f64f };
    bad = 0;
    for (int k = 0; k < 100; k++) {
        size_t len = 0;
        while (len + 4 < 2000) {
            int b = (int)(sdp_rng_next(&rng) % 4);
            uint32_t c = lo[b] + (uint32_t)(sdp_rng_next(&rng) % (hi[b] - lo[b] + 1));
            if (c < 0x80) {
                buf[len++] = (char)c;
            } else if (c < 0x10000) {
                buf[len++] = (char)(0xe0 | (c >> 12));
                buf[len++] = (char)(0x80 | ((c >> 6) & 0x3f));
                buf[len++] = (char)(0x80 | (c & 0x3f));
            } else {
                buf[len++] = (char)(0xf0 | (c >> 18));
                buf[len++] = (char)(0x80 | ((c >> 12) & 0x3f));
                buf[len++] = (char)(0x80 | ((c >> 6) & 0x3f));
                buf[len++] = (char)(0x80 | (c & 0x3f));
            }
        }
        bad += !round_trip(t, buf, len);
    }
    CHECK(!bad, "%s: %d of 100 random valid UTF-8 texts do not round-trip", name, bad);
    printf("  %s: empty input, 256 single bytes, 200 random byte strings, edge cases and 100 "
           "random UTF-8 texts checked\n",
           name);

    /* an added token inside text: its id, and the text around it encoded on its own */
    int eot = sdp_tok_token_id(t, "<|endoftext|>");
    uint32_t *a, *b, *c;
    size_t na, nb, nc;
    rc = sdp_tok_encode(t, "abc<|endoftext|>def", 19, &c, &nc);
    rc |= sdp_tok_encode(t, "abc", 3, &a, &na);
    rc |= sdp_tok_encode(t, "def", 3, &b, &nb);
    int ok = !rc && eot >= 0 && nc == na + 1 + nb && !memcmp(c, a, na * 4) &&
             c[na] == (uint32_t)eot && !memcmp(c + na + 1, b, nb * 4);
    printf("  %s: \"abc<|endoftext|>def\" = ids(abc) + [%d] + ids(def): %s\n", name, eot,
           ok ? "yes" : "no");
    CHECK(ok, "%s: added token in text", name);
    if (!rc) {
        free(a);
        free(b);
        free(c);
    }
}

/* ---- malformed files ---- */

/* GPT-2's byte alphabet, written out independently of text/bpe.c */
static void byte_char(int b, char *out)
{
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    int cp = b;
    if (!printable) {
        cp = 256;
        for (int x = 0; x < b; x++)
            cp += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    }
}

/* A minimal valid byte-level BPE tokenizer.json: 256 byte tokens, "ab" = 256, "Ġa" = 257. */
static json_t *tiny_tokenizer(void)
{
    json_t *vocab = json_object();
    char s[4];
    for (int b = 0; b < 256; b++) {
        byte_char(b, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    json_object_set_new(vocab, "ab", json_integer(256));
    json_object_set_new(vocab, "Ġa", json_integer(257));
    return json_pack(
        "{s:[{s:i,s:s,s:b,s:b}],s:{s:s},s:{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b,"
        "s:b}]},s:{s:s},s:{s:s,s:o,s:[s,[s,s]],s:b}}",
        "added_tokens", "id", 258, "content", "<eot>", "special", 1, "normalized", 0, "normalizer",
        "type", "NFC", "pre_tokenizer", "type", "Sequence", "pretokenizers", "type", "Split",
        "pattern", "Regex", " ?\\p{L}+|\\s+|[^\\s\\p{L}]+", "behavior", "Isolated", "invert", 0,
        "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 0, "decoder", "type", "ByteLevel",
        "model", "type", "BPE", "vocab", vocab, "merges", "a b", "Ġ", "a", "ignore_merges", 0);
}

struct bad_case {
    const char *what;
    const char *key, *sub; /* set root[key][sub] (sub NULL: root[key]) to the JSON in value */
    const char *value;
    int want;
};

static void test_malformed(const char *dir)
{
    static const struct bad_case cases[] = {
        { "model.type WordPiece", "model", "type", "\"WordPiece\"", -EINVAL },
        { "unknown normalizer", "normalizer", NULL, "{\"type\": \"Lowercase\"}", -EINVAL },
        { "unknown pre-tokenizer", "pre_tokenizer", NULL, "{\"type\": \"Whitespace\"}", -EINVAL },
        { "no pre-tokenizer", "pre_tokenizer", NULL, "null", -EINVAL },
        { "ByteLevel not last", "pre_tokenizer", "pretokenizers",
          "[{\"type\": \"ByteLevel\"}, {\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, "
          "\"behavior\": \"Isolated\"}]",
          -EINVAL },
        { "bad regex", "pre_tokenizer", "pretokenizers",
          "[{\"type\": \"Split\", \"pattern\": {\"Regex\": \"[a-\"}, \"behavior\": \"Isolated\"},"
          " {\"type\": \"ByteLevel\"}]",
          -EINVAL },
        { "Split behavior Contiguous", "pre_tokenizer", "pretokenizers",
          "[{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Contiguous\"},"
          " {\"type\": \"ByteLevel\"}]",
          -EINVAL },
        { "merge of a missing token", "model", "merges", "[\"a zz\"]", -EINVAL },
        { "merge result missing", "model", "merges", "[\"b c\"]", -EINVAL },
        { "merge not two tokens", "model", "merges", "[\"abc\"]", -EINVAL },
        { "vocab id not an integer", "model", "vocab", "{\"a\": \"x\"}", -EINVAL },
        { "vocab id negative", "model", "vocab", "{\"a\": -3}", -EINVAL },
        { "added token without content", "added_tokens", NULL, "[{\"id\": 300}]", -EINVAL },
        { "byte_fallback", "model", "byte_fallback", "true", -EINVAL },
        { "dropout", "model", "dropout", "0.1", -EINVAL },
        { "decoder WordPiece", "decoder", NULL, "{\"type\": \"WordPiece\"}", -EINVAL },
    };
    char path[4096];
    sdp_tok_t *t;
    int rc;

    json_t *base = tiny_tokenizer();
    snprintf(path, sizeof(path), "%s/tiny.json", dir);
    json_dump_file(base, path, 0);
    rc = sdp_tok_load(path, &t);
    CHECK(!rc, "the tiny valid tokenizer.json does not load (rc %d)", rc);
    if (!rc) {
        /* by hand: "ab" merges (rank 0); " a" merges into "Ġa"; <eot> is the added token */
        static const uint32_t want[] = { 256, 257, 258, 'c' };
        uint32_t *ids;
        size_t n;
        rc = sdp_tok_encode(t, "ab a<eot>c", 10, &ids, &n);
        int ok = !rc && n == 4 && !memcmp(ids, want, sizeof(want));
        printf("  tiny tokenizer: \"ab a<eot>c\" -> %s\n", ok ? "256 257 258 99 (by hand)" : "?");
        CHECK(ok, "tiny tokenizer ids");
        if (!rc)
            free(ids);
        sdp_tok_free(t);
    }

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct bad_case *c = &cases[i];
        json_t *root = json_deep_copy(base), *val = json_loads(c->value, JSON_DECODE_ANY, NULL);
        if (c->sub)
            json_object_set_new(json_object_get(root, c->key), c->sub, val);
        else
            json_object_set_new(root, c->key, val);
        snprintf(path, sizeof(path), "%s/bad%zu.json", dir, i);
        json_dump_file(root, path, 0);
        json_decref(root);
        t = NULL;
        rc = sdp_tok_load(path, &t);
        printf("  malformed (%s): rc %d, want %d\n", c->what, rc, c->want);
        CHECK(rc == c->want && !t, "%s: rc %d", c->what, rc);
        sdp_tok_free(t);
        unlink(path);
    }

    /* JSON syntax errors, a missing path, a directory without tokenizer files */
    static const char *const broken[] = { "{\"model\": {", "[1, 2]", "", "{\"model\": 3}" };
    for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
        snprintf(path, sizeof(path), "%s/broken%zu.json", dir, i);
        FILE *f = fopen(path, "w");
        fputs(broken[i], f);
        fclose(f);
        t = NULL;
        rc = sdp_tok_load(path, &t);
        printf("  malformed JSON '%s': rc %d, want %d\n", broken[i], rc, -EINVAL);
        CHECK(rc == -EINVAL && !t, "broken JSON '%s': rc %d", broken[i], rc);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/no-such-file.json", dir);
    rc = sdp_tok_load(path, &t);
    int rc2 = sdp_tok_load(dir, &t);
    printf("  missing file: rc %d, empty directory: rc %d, want %d\n", rc, rc2, -ENOENT);
    CHECK(rc == -ENOENT && rc2 == -ENOENT, "missing file / empty directory");

    /* GPT-2 layout with a bad merges.txt line */
    snprintf(path, sizeof(path), "%s/vocab.json", dir);
    json_dump_file(json_object_get(json_object_get(base, "model"), "vocab"), path, 0);
    snprintf(path, sizeof(path), "%s/merges.txt", dir);
    FILE *f = fopen(path, "w");
    fputs("#version: 0.2\na b\na b c\n", f);
    fclose(f);
    rc = sdp_tok_load(dir, &t);
    printf("  merges.txt with a three-token line: rc %d, want %d\n", rc, -EINVAL);
    CHECK(rc == -EINVAL, "bad merges.txt: rc %d", rc);
    unlink(path);
    snprintf(path, sizeof(path), "%s/vocab.json", dir);
    unlink(path);
    json_decref(base);
}

int main(void)
{
    const char *src = getenv("top_srcdir") ? getenv("top_srcdir") : ".";
    char path[4096];
    sdp_tok_t *qwen = NULL, *gpt2 = NULL;

    snprintf(path, sizeof(path), "%s/data/tokenizers/qwen3/tokenizer.json", src);
    int rc = sdp_tok_load(path, &qwen);
    CHECK(!rc, "cannot load %s", path);
    snprintf(path, sizeof(path), "%s/data/tokenizers/gpt2", src);
    rc |= sdp_tok_load(path, &gpt2);
    CHECK(!rc, "cannot load %s", path);
    if (rc) {
        printf("FAIL\n");
        return 1;
    }

    /* reference values printed by tokenizers 0.23: Tokenizer.from_file(...).encode(s,
     * add_special_tokens=False).ids, get_vocab_size(True), token_to_id("<|endoftext|>") */
    printf("qwen3: vocab %u (tokenizers 151669), <|endoftext|> %d (151643)\n",
           sdp_tok_vocab_size(qwen), sdp_tok_token_id(qwen, "<|endoftext|>"));
    CHECK(sdp_tok_vocab_size(qwen) == 151669, "qwen3 vocab size");
    CHECK(sdp_tok_token_id(qwen, "<|endoftext|>") == 151643, "qwen3 <|endoftext|>");
    CHECK(sdp_tok_token_id(qwen, "Ġthe") == 279, "qwen3 'Ġthe' id");
    CHECK(sdp_tok_token_id(qwen, "no such token") == -ENOENT, "missing token");
    static const uint32_t q1[] = { 9707,   1879,  151643, 51950, 3958,  75402, 21894,
                                   102819, 11162, 97,     245,   18611, 220,   856 };
    check_ids(qwen, "qwen3", "Hello world<|endoftext|> café e\xcc\x81 日本語 🤗  \n\n  x", q1,
              sizeof(q1) / sizeof(q1[0]));
    printf("gpt2: vocab %u (tokenizers 50257), <|endoftext|> %d (50256)\n",
           sdp_tok_vocab_size(gpt2), sdp_tok_token_id(gpt2, "<|endoftext|>"));
    CHECK(sdp_tok_vocab_size(gpt2) == 50257, "gpt2 vocab size");
    CHECK(sdp_tok_token_id(gpt2, "<|endoftext|>") == 50256, "gpt2 <|endoftext|>");
    static const uint32_t g1[] = { 15496, 995, 50256, 40304, 304,   136, 223,   10545,
                                   245,   98,  17312, 105,   45739, 252, 12520, 97,
                                   245,   220, 220,   628,   220,   2124 };
    check_ids(gpt2, "gpt2", "Hello world<|endoftext|> café e\xcc\x81 日本語 🤗  \n\n  x", g1,
              sizeof(g1) / sizeof(g1[0]));

    /* NFC: Qwen3 normalizes, so "e + U+0301" encodes as U+00E9; GPT-2 has no normalizer */
    int q = ids_equal(qwen,
                      "caf"
                      "e\xcc\x81",
                      "caf\xc3\xa9");
    int g = ids_equal(gpt2,
                      "caf"
                      "e\xcc\x81",
                      "caf\xc3\xa9");
    printf("NFC: ids(\"cafe\\u0301\") == ids(\"caf\\u00e9\"): qwen3 %s, gpt2 %s\n",
           q == 1 ? "yes" : "no", g == 1 ? "yes" : "no");
    CHECK(q == 1, "qwen3 does not apply NFC");
    CHECK(g == 0, "gpt2 normalizes though it has no normalizer");

    printf("qwen3 properties:\n");
    test_common(qwen, "qwen3", 1);
    printf("gpt2 properties:\n");
    test_common(gpt2, "gpt2", 0);
    sdp_tok_free(qwen);
    sdp_tok_free(gpt2);

    printf("malformed tokenizer files (each error is logged on stderr):\n");
    if (!sdp_test_mkdtemp("sdp-test-tok"))
        return sdp_test_finish(1);
    test_malformed(sdp_test_dir());
    sdp_test_rm_tree(sdp_test_dir());

    return sdp_test_finish(sdp_test_nfail);
}
