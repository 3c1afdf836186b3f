/* test_json.c — the streaming JSON writer (src/base/json.c): comma/nesting logic, escaping,
 * invalid UTF-8 replacement, numbers, misuse detection. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/json.h"

/* Run `body` against a memstream writer with `indent`; returns the malloc'd text and sets *rc
 * to json_finish's result. */
#define CAPTURE(indent, rc, body)                                                                            \
    ({                                                                                                       \
        char *buf_ = NULL;                                                                                   \
        size_t len_ = 0;                                                                                     \
        FILE *fp_ = open_memstream(&buf_, &len_);                                                            \
        json_writer jw_;                                                                                     \
        json_writer *j = &jw_;                                                                               \
        json_init(j, fp_, indent);                                                                           \
        body;                                                                                                \
        *(rc) = json_finish(j);                                                                              \
        fclose(fp_);                                                                                         \
        buf_;                                                                                                \
    })

int main(void) {
    int rc;
    char *s = CAPTURE(0, &rc, {
        json_obj_begin(j);
        json_kv_str(j, "a", "x");
        json_key(j, "arr");
        json_arr_begin(j);
        json_int(j, -3);
        json_uint(j, 18446744073709551615ull);
        json_num(j, 0.1);
        json_bool(j, true);
        json_null(j);
        json_obj_begin(j);
        json_obj_end(j);
        json_arr_begin(j);
        json_arr_end(j);
        json_arr_end(j);
        json_kv_num(j, "nan", 0.0 / 0.0);
        json_kv_num(j, "big", 1e300);
        json_kv_bool(j, "f", false);
        json_kv_str(j, "n", NULL);
        json_obj_end(j);
    });
    CHECK(rc == 0, "finish");
    CHECK(!strcmp(s, "{\"a\":\"x\",\"arr\":[-3,18446744073709551615,0.1,true,null,{},[]],\"nan\":null,"
                     "\"big\":1e+300,\"f\":false,\"n\":null}"),
          "compact: %s", s);
    free(s);

    s = CAPTURE(2, &rc, {
        json_obj_begin(j);
        json_kv_int(j, "k", 1);
        json_key(j, "l");
        json_arr_begin(j);
        json_int(j, 2);
        json_arr_end(j);
        json_obj_end(j);
    });
    CHECK(rc == 0 && !strcmp(s, "{\n  \"k\": 1,\n  \"l\": [\n    2\n  ]\n}\n"), "pretty: %s", s);
    free(s);

    s = CAPTURE(0, &rc,
                json_strn(j, "q\"b\\n\n\t\x01\x7f\xc3\xa9\xff\xe2\x82\xf0\x9f\x98\x80 \xed\xa0\x80", 22));
    CHECK(rc == 0 && !strcmp(s, "\"q\\\"b\\\\n\\n\\t\\u0001\x7f\xc3\xa9\\ufffd\\ufffd\\ufffd\xf0\x9f\x98\x80 "
                                "\\ufffd\\ufffd\\ufffd\""),
          "escape: %s", s);
    free(s);
    s = CAPTURE(0, &rc, json_strn(j, "a\0b", 3));
    CHECK(rc == 0 && !strcmp(s, "\"a\\u0000b\""), "NUL: %s", s);
    free(s);

    /* misuse */
    s = CAPTURE(0, &rc, {
        json_obj_begin(j);
        json_int(j, 1);
        json_obj_end(j);
    });
    CHECK(rc != 0, "value without key accepted");
    free(s);
    s = CAPTURE(0, &rc, {
        json_arr_begin(j);
        json_key(j, "x");
        json_arr_end(j);
    });
    CHECK(rc != 0, "key in array accepted");
    free(s);
    s = CAPTURE(0, &rc, {
        json_obj_begin(j);
        json_key(j, "x");
        json_obj_end(j);
    });
    CHECK(rc != 0, "key without value accepted");
    free(s);
    s = CAPTURE(0, &rc, {
        json_arr_begin(j);
        json_obj_end(j);
    });
    CHECK(rc != 0, "mismatched end accepted");
    free(s);
    s = CAPTURE(0, &rc, {
        json_int(j, 1);
        json_int(j, 2);
    });
    CHECK(rc != 0, "two top-level values accepted");
    free(s);
    s = CAPTURE(0, &rc, json_arr_begin(j));
    CHECK(rc != 0, "unclosed array accepted");
    free(s);
    s = CAPTURE(0, &rc, {
        for (int i = 0; i < 70; i++) json_arr_begin(j);
    });
    CHECK(rc != 0, "depth overflow accepted");
    free(s);
    s = CAPTURE(0, &rc, json_num(j, 3.0));
    CHECK(rc == 0 && !strcmp(s, "3"), "3.0 -> %s", s);
    free(s);
    return check_done("test_json");
}
