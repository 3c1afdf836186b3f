/* jsonschema.c — JSON Schema to grammar nodes (contract in jsonschema.h). */
#include "text/jsonschema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

#define MAX_REFS 256
#define MAX_NEST 64

typedef struct {
    grammar *g;
    const cJSON *root;
    char *refs[MAX_REFS];
    int ref_node[MAX_REFS];
    int n_refs;
    char *err;
    size_t cap;
    char path[512];
    int nest;
} jsc;

static int fail(jsc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(jsc *c, const char *fmt, ...) {
    if (c->err[0]) return -1; /* the first error wins */
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->cap, "%s at %s", msg, c->path[0] ? c->path : "#");
    return -1;
}

/* grammar errors (out of memory, contradictions) with the path */
static int gcheck(jsc *c, int id) {
    if (id < 0) fail(c, "%s", rl_lasterr());
    return id;
}

static size_t path_push(jsc *c, const char *seg) {
    size_t n = strlen(c->path);
    if (!n) snprintf(c->path, sizeof c->path, "#");
    size_t m = strlen(c->path);
    snprintf(c->path + m, sizeof c->path - m, "/%s", seg);
    return n;
}
static void path_pop(jsc *c, size_t n) { c->path[n] = 0; }

static int compile(jsc *c, const cJSON *s);

static const char *const UNSUPPORTED[] = {"pattern",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "multipleOf",
                                          "patternProperties",
                                          "propertyNames",
                                          "minProperties",
                                          "maxProperties",
                                          "uniqueItems",
                                          "contains",
                                          "minContains",
                                          "maxContains",
                                          "prefixItems",
                                          "additionalItems",
                                          "unevaluatedProperties",
                                          "unevaluatedItems",
                                          "not",
                                          "if",
                                          "then",
                                          "else",
                                          "dependentRequired",
                                          "dependentSchemas",
                                          "dependencies",
                                          NULL};
/* keywords that constrain (a $ref / allOf next to them is refused) */
static const char *const CONSTRAINTS[] = {"type",      "properties", "required", "additionalProperties",
                                          "items",     "minItems",   "maxItems", "minLength",
                                          "maxLength", "enum",       "const",    "anyOf",
                                          "oneOf",     "allOf",      "$ref",     NULL};

static bool in_list(const char *k, const char *const *l) {
    for (int i = 0; l[i]; i++)
        if (!strcmp(k, l[i])) return true;
    return false;
}

static const cJSON *get(const cJSON *s, const char *k) { return cJSON_GetObjectItemCaseSensitive(s, k); }

static int get_count(jsc *c, const cJSON *s, const char *k, int dflt, int *out) {
    const cJSON *v = get(s, k);
    *out = dflt;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e6 ||
        v->valuedouble != (double)(int)v->valuedouble)
        return fail(c, "'%s' must be a non-negative integer (at most 1000000)", k);
    *out = (int)v->valuedouble;
    return 0;
}

/* enum / const: the values written compactly */
static int compile_literals(jsc *c, const cJSON *vals, int n_extra_null) {
    int n = cJSON_GetArraySize(vals);
    if (n + n_extra_null == 0) return fail(c, "'enum' is empty: the schema admits no value");
    if (n > 4096) return fail(c, "'enum' has %d values: at most 4096 are supported", n);
    char **t = calloc((size_t)n + 1, sizeof *t);
    size_t *len = calloc((size_t)n + 1, sizeof *len);
    int k = 0, id = -1;
    if (!t || !len) goto out;
    const cJSON *v;
    cJSON_ArrayForEach(v, vals) {
        if (!(t[k] = cJSON_PrintUnformatted(v))) goto out;
        len[k] = strlen(t[k]);
        k++;
    }
    if (n_extra_null) {
        if (!(t[k] = strdup("null"))) goto out;
        len[k++] = 4;
    }
    id = gcheck(c, grammar_literals(c->g, k, (const char *const *)t, len, NULL));
out:
    if (t)
        for (int i = 0; i < k; i++) free(t[i]);
    free(t);
    free(len);
    if (!c->err[0] && id < 0) fail(c, "out of memory");
    return id;
}

static int compile_object(jsc *c, const cJSON *s) {
    const cJSON *props = get(s, "properties"), *req = get(s, "required"),
                *ap = get(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return fail(c, "'required' must be an array of names");
    int n = props ? cJSON_GetArraySize(props) : 0;
    if (n > GRAMMAR_MAX_PROPS)
        return fail(c, "an object with %d properties: at most %d are supported", n, GRAMMAR_MAX_PROPS);
    const char *names[GRAMMAR_MAX_PROPS];
    int nodes[GRAMMAR_MAX_PROPS];
    bool required[GRAMMAR_MAX_PROPS];
    int k = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        size_t mark = path_push(c, "properties");
        size_t mark2 = strlen(c->path);
        snprintf(c->path + mark2, sizeof c->path - mark2, "/%s", p->string);
        names[k] = p->string;
        required[k] = false;
        nodes[k] = compile(c, p);
        path_pop(c, mark);
        if (nodes[k] < 0) return -1;
        k++;
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) return fail(c, "'required' must be an array of names");
        int i = 0;
        while (i < k && strcmp(names[i], r->valuestring)) i++;
        if (i == k) return fail(c, "'required' names \"%s\", which is not in 'properties'", r->valuestring);
        required[i] = true;
    }
    int extra = -1;
    if (ap && cJSON_IsTrue(ap)) extra = grammar_any(c->g);
    else if (ap && cJSON_IsObject(ap)) {
        size_t mark = path_push(c, "additionalProperties");
        extra = compile(c, ap);
        path_pop(c, mark);
        if (extra < 0) return -1;
    } else if (ap && !cJSON_IsFalse(ap)) {
        return fail(c, "'additionalProperties' must be a boolean or a schema");
    } else if (!ap && !props) {
        extra = grammar_any(c->g); /* {"type": "object"}: any object */
    }
    if (extra < 0 && ((ap && cJSON_IsTrue(ap)) || (!ap && !props))) return gcheck(c, -1);
    return gcheck(c, grammar_object(c->g, k, names, nodes, required, extra));
}

static int compile_array(jsc *c, const cJSON *s) {
    const cJSON *items = get(s, "items");
    int min, max, item;
    if (get_count(c, s, "minItems", 0, &min) || get_count(c, s, "maxItems", -1, &max)) return -1;
    if (items && cJSON_IsArray(items))
        return fail(c, "unsupported JSON Schema keyword 'items' as a list (tuples)");
    if (items && !cJSON_IsFalse(items)) {
        size_t mark = path_push(c, "items");
        item = compile(c, items);
        path_pop(c, mark);
        if (item < 0) return -1;
    } else if (items) { /* items: false — only the empty array */
        item = grammar_any(c->g);
        max = 0;
        if (min > 0) return fail(c, "'items': false with minItems > 0 admits nothing");
    } else {
        item = grammar_any(c->g);
    }
    return gcheck(c, grammar_array(c->g, item, min, max));
}

static int compile_type(jsc *c, const char *t, const cJSON *s) {
    if (!strcmp(t, "object")) return compile_object(c, s);
    if (!strcmp(t, "array")) return compile_array(c, s);
    if (!strcmp(t, "string")) {
        int min, max;
        if (get_count(c, s, "minLength", 0, &min) || get_count(c, s, "maxLength", -1, &max)) return -1;
        return gcheck(c, grammar_string(c->g, min, max));
    }
    if (!strcmp(t, "number") || !strcmp(t, "integer")) return gcheck(c, grammar_number(c->g, t[0] == 'i'));
    if (!strcmp(t, "boolean")) {
        const char *l[2] = {"true", "false"};
        size_t n[2] = {4, 5};
        return gcheck(c, grammar_literals(c->g, 2, l, n, NULL));
    }
    if (!strcmp(t, "null")) return gcheck(c, grammar_literal(c->g, "null"));
    return fail(c, "unknown type '%s' (use object, array, string, number, integer, boolean or null)", t);
}

/* "#/a/b~1c" -> the node of the document it names */
static const cJSON *pointer(const cJSON *root, const char *ref) {
    if (strcmp(ref, "#") == 0) return root;
    if (strncmp(ref, "#/", 2)) return NULL;
    const cJSON *cur = root;
    const char *p = ref + 2;
    while (cur) {
        char seg[256];
        size_t k = 0;
        while (*p && *p != '/' && k + 1 < sizeof seg) {
            if (p[0] == '~' && p[1] == '1') seg[k++] = '/', p += 2;
            else if (p[0] == '~' && p[1] == '0') seg[k++] = '~', p += 2;
            else seg[k++] = *p++;
        }
        seg[k] = 0;
        if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(seg, &end, 10);
            cur = *end || end == seg ? NULL : cJSON_GetArrayItem(cur, (int)i);
        } else {
            cur = cJSON_GetObjectItemCaseSensitive(cur, seg);
        }
        if (!*p) return cur;
        p++;
    }
    return NULL;
}

static int compile_ref(jsc *c, const char *ref) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i], ref)) return c->ref_node[i]; /* compiled, or being compiled (recursion) */
    const cJSON *t = pointer(c->root, ref);
    if (!t)
        return fail(
            c, "'$ref' \"%s\" does not name a schema in this document (only local refs like #/$defs/X)", ref);
    if (c->n_refs == MAX_REFS) return fail(c, "more than %d distinct $refs", MAX_REFS);
    int id = gcheck(c, grammar_reserve(c->g));
    if (id < 0) return -1;
    if (!(c->refs[c->n_refs] = strdup(ref))) return fail(c, "out of memory");
    c->ref_node[c->n_refs++] = id;
    char saved[sizeof c->path];
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref);
    int x = compile(c, t);
    memcpy(c->path, saved, sizeof saved);
    if (x < 0) return -1;
    return grammar_define(c->g, id, x) ? gcheck(c, -1) : id;
}

static int compile_alts(jsc *c, const cJSON *alts, const char *kw) {
    int n = cJSON_GetArraySize(alts);
    if (!cJSON_IsArray(alts) || n == 0) return fail(c, "'%s' must be a non-empty array of schemas", kw);
    if (n > 256) return fail(c, "'%s' has %d alternatives: at most 256", kw, n);
    int ids[256], k = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, alts) {
        char seg[80];
        snprintf(seg, sizeof seg, "%s/%d", kw, k);
        size_t mark = path_push(c, seg);
        ids[k] = compile(c, a);
        path_pop(c, mark);
        if (ids[k++] < 0) return -1;
    }
    return k == 1 ? ids[0] : gcheck(c, grammar_anyof(c->g, k, ids)); /* k == n: every one compiled */
}

static int other_constraints(const cJSON *s, const char *except) {
    const cJSON *k;
    cJSON_ArrayForEach(k, s) if (strcmp(k->string, except) && in_list(k->string, CONSTRAINTS)) return 1;
    return 0;
}

static int compile_body(jsc *c, const cJSON *s) {
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        if (in_list(k->string, UNSUPPORTED))
            return fail(
                c,
                "unsupported JSON Schema keyword '%s' (this server's grammar cannot enforce it: remove it, "
                "or describe the constraint in the property's description)",
                k->string);
    }
    const cJSON *ref = get(s, "$ref"), *en = get(s, "enum"), *cn = get(s, "const"), *any = get(s, "anyOf"),
                *one = get(s, "oneOf"), *all = get(s, "allOf"), *type = get(s, "type"),
                *nl = get(s, "nullable");
    int nullable = cJSON_IsTrue(nl) ? 1 : 0;
    if (ref) {
        if (!cJSON_IsString(ref)) return fail(c, "'$ref' must be a string");
        if (other_constraints(s, "$ref"))
            return fail(
                c, "unsupported: '$ref' next to other constraints (move them into the referenced schema)");
        return compile_ref(c, ref->valuestring);
    }
    if (all) {
        if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) != 1 || other_constraints(s, "allOf"))
            return fail(
                c,
                "unsupported JSON Schema keyword 'allOf' (only a single schema with no other constraints)");
        size_t mark = path_push(c, "allOf/0");
        int id = compile(c, cJSON_GetArrayItem(all, 0));
        path_pop(c, mark);
        return id;
    }
    if (cn) {
        cJSON one_val = *cn; /* a one-element list of the const value */
        one_val.next = one_val.prev = NULL;
        cJSON arr = {0};
        arr.type = cJSON_Array;
        arr.child = &one_val;
        one_val.prev = &one_val;
        return compile_literals(c, &arr, nullable);
    }
    if (en) {
        if (!cJSON_IsArray(en)) return fail(c, "'enum' must be an array");
        return compile_literals(c, en, nullable);
    }
    int id;
    if (any || one) {
        if (any && one) return fail(c, "'anyOf' and 'oneOf' together are not supported");
        id = compile_alts(c, any ? any : one, any ? "anyOf" : "oneOf");
    } else if (cJSON_IsArray(type)) {
        int ids[8], n = 0;
        const cJSON *t;
        cJSON_ArrayForEach(t, type) {
            if (!cJSON_IsString(t) || n == 8) return fail(c, "'type' must be a type name or a list of them");
            if ((ids[n++] = compile_type(c, t->valuestring, s)) < 0) return -1;
        }
        if (n == 0) return fail(c, "'type' is an empty list: the schema admits no value");
        id = n == 1 ? ids[0] : gcheck(c, grammar_anyof(c->g, n, ids));
    } else if (type) {
        if (!cJSON_IsString(type)) return fail(c, "'type' must be a type name or a list of them");
        id = compile_type(c, type->valuestring, s);
    } else if (get(s, "properties") || get(s, "additionalProperties") || get(s, "required")) {
        id = compile_object(c, s);
    } else if (get(s, "items") || get(s, "minItems") || get(s, "maxItems")) {
        id = compile_array(c, s);
    } else if (get(s, "minLength") || get(s, "maxLength")) {
        id = compile_type(c, "string", s);
    } else {
        id = gcheck(c, grammar_any(c->g));
    }
    if (id >= 0 && nullable) {
        int alts[2] = {id, gcheck(c, grammar_literal(c->g, "null"))};
        id = alts[1] < 0 ? -1 : gcheck(c, grammar_anyof(c->g, 2, alts));
    }
    return id;
}

static int compile(jsc *c, const cJSON *s) {
    if (c->err[0]) return -1;
    if (cJSON_IsTrue(s)) return gcheck(c, grammar_any(c->g));
    if (cJSON_IsFalse(s)) return fail(c, "the schema false admits no value");
    if (!cJSON_IsObject(s)) return fail(c, "a schema must be an object or a boolean");
    if (c->nest >= MAX_NEST) return fail(c, "the schema nests deeper than %d levels", MAX_NEST);
    c->nest++;
    int id = compile_body(c, s);
    c->nest--;
    return id;
}

static void jsc_free(jsc *c) {
    for (int i = 0; i < c->n_refs; i++) free(c->refs[i]);
}

int jsonschema_compile(grammar *g, const cJSON *schema, char *err, size_t cap) {
    jsc c = {.g = g, .root = schema, .err = err, .cap = cap};
    err[0] = 0;
    int id = compile(&c, schema);
    jsc_free(&c);
    if (id < 0 && !err[0]) snprintf(err, cap, "%s", rl_lasterr());
    return id;
}

/* A forced call's arguments follow the tool's parameters schema whenever the grammar can express
 * it, strict or not: the call is then valid against its declaration (required keys, types), which
 * is what the server checks before it passes a call on. A non-strict tool whose schema uses a
 * keyword the grammar cannot enforce falls back to any JSON object; a strict one is an error. */
static int tool_args(jsc *c, const cJSON *fn, bool strict) {
    const cJSON *params = get(fn, "parameters");
    bool is_strict = strict || cJSON_IsTrue(get(fn, "strict"));
    if (!params) return gcheck(c, grammar_any_object(c->g));
    c->root = params;
    c->n_refs = 0;
    int id = compile(c, params);
    if (id >= 0 || is_strict) return id;
    c->err[0] = 0;
    c->path[0] = 0;
    c->nest = 0;
    return gcheck(c, grammar_any_object(c->g));
}

int jsonschema_tool_call(grammar *g, const cJSON *tools, const char *name, bool all_strict, char *err,
                         size_t cap) {
    jsc c = {.g = g, .err = err, .cap = cap};
    err[0] = 0;
    int n = cJSON_GetArraySize(tools), k = 0, id = -1;
    char **lits = calloc((size_t)n + 1, sizeof *lits);
    size_t *lens = calloc((size_t)n + 1, sizeof *lens);
    int *conts = calloc((size_t)n + 1, sizeof *conts);
    int close = grammar_literal(g, "}\n</tool_call>");
    if (!lits || !lens || !conts || close < 0) {
        snprintf(err, cap, "out of memory");
        goto out;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = get(t, "function");
        const cJSON *nm = fn ? get(fn, "name") : NULL;
        if (!nm || !cJSON_IsString(nm) || (name && strcmp(nm->valuestring, name))) continue;
        snprintf(c.path, sizeof c.path, "tools[%d].function.parameters", k);
        jsc_free(&c);
        int args = tool_args(&c, fn, all_strict);
        if (args < 0) goto out;
        int seq[2] = {args, close};
        if ((conts[k] = gcheck(&c, grammar_seq(g, 2, seq))) < 0) goto out;
        /* the name as a JSON string, as the template writes it */
        cJSON *js = cJSON_CreateString(nm->valuestring);
        char *q = js ? cJSON_PrintUnformatted(js) : NULL;
        cJSON_Delete(js);
        size_t ql = q ? strlen(q) : 0;
        lits[k] = q ? malloc(ql + 64) : NULL;
        if (!lits[k]) {
            free(q);
            snprintf(err, cap, "out of memory");
            goto out;
        }
        lens[k] = (size_t)snprintf(lits[k], ql + 64, "<tool_call>\n{\"name\": %s, \"arguments\": ", q);
        free(q);
        k++;
    }
    if (k == 0) {
        if (name) snprintf(err, cap, "tool_choice names the function \"%s\", which is not in 'tools'", name);
        else snprintf(err, cap, "tool_choice requires a tool call but no function tools were given");
        goto out;
    }
    id = grammar_literals(g, k, (const char *const *)lits, lens, conts);
    if (id < 0) snprintf(err, cap, "%s", rl_lasterr());
out:
    jsc_free(&c);
    if (lits)
        for (int i = 0; i < k; i++) free(lits[i]);
    free(lits);
    free(lens);
    free(conts);
    return id;
}
