// web/cjson_subset.c: the part of cJSON's API that the planner and the DeepSpeed config parser
// use, for the WebAssembly build only. Debian ships cJSON as a header and a native shared
// library, neither of which links into a wasm32-wasi program, so this file implements those
// functions against Debian's own cjson/cJSON.h (the same struct and type bits; items linked
// as cJSON links them, child->prev being the last child). Native builds link the real -lcjson.
//
// Parsing follows RFC 8259 as cJSON does: whitespace, objects, arrays, strings with escapes
// (\uXXXX, surrogate pairs to UTF-8), numbers through strtod, true/false/null. On failure
// return_parse_end points at the byte where parsing stopped.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <cjson/cJSON.h>

typedef struct { const unsigned char *s; size_t n, i; int depth; } Src;

static cJSON *item_new(int type) {
    cJSON *it = calloc(1, sizeof(cJSON));
    if (it) it->type = type;
    return it;
}
static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void cJSON_Delete(cJSON *it) {
    while (it) {
        cJSON *next = it->next;
        if (!(it->type & cJSON_IsReference)) {
            cJSON_Delete(it->child);
            free(it->valuestring);
        }
        if (!(it->type & cJSON_StringIsConst)) free(it->string);
        free(it);
        it = next;
    }
}
void cJSON_free(void *p) { free(p); }
void *cJSON_malloc(size_t n) { return malloc(n); }

static void skip_ws(Src *p) { while (p->i < p->n && p->s[p->i] && p->s[p->i] <= 32) p->i++; }
static int at(const Src *p, char c) { return p->i < p->n && p->s[p->i] == (unsigned char)c; }
static int hex4(const unsigned char *h, unsigned *out) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = h[k], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

// A string at p->i (which is '"'), into a fresh buffer; NULL on failure, p->i at the culprit.
static char *parse_string(Src *p) {
    size_t start = ++p->i, end = start;
    while (end < p->n && p->s[end] != '"') {
        if (p->s[end] == '\\') end++;
        end++;
    }
    if (end >= p->n) return NULL;
    char *out = malloc(end - start + 1), *o = out;
    if (!out) return NULL;
    size_t i = start;
    while (i < end) {
        unsigned char c = p->s[i];
        if (c != '\\') { *o++ = (char)c; i++; continue; }
        if (i + 1 >= end) goto fail;
        c = p->s[i + 1];
        switch (c) {
        case 'b': *o++ = '\b'; i += 2; break;
        case 'f': *o++ = '\f'; i += 2; break;
        case 'n': *o++ = '\n'; i += 2; break;
        case 'r': *o++ = '\r'; i += 2; break;
        case 't': *o++ = '\t'; i += 2; break;
        case '"': case '\\': case '/': *o++ = (char)c; i += 2; break;
        case 'u': {
            unsigned cp, lo;
            if (end - i < 6 || hex4(p->s + i + 2, &cp)) goto fail;
            i += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF) goto fail;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - i < 6 || p->s[i] != '\\' || p->s[i + 1] != 'u' || hex4(p->s + i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    goto fail;
                cp = 0x10000 + (((cp & 0x3FF) << 10) | (lo & 0x3FF));
                i += 6;
            }
            if (cp < 0x80) *o++ = (char)cp;
            else if (cp < 0x800) { *o++ = (char)(0xC0 | cp >> 6); *o++ = (char)(0x80 | (cp & 0x3F)); }
            else if (cp < 0x10000) {
                *o++ = (char)(0xE0 | cp >> 12); *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
            } else {
                *o++ = (char)(0xF0 | cp >> 18); *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: goto fail;
        }
    }
    *o = 0;
    p->i = end + 1;
    return out;
fail: // (cJSON reports a bad escape at the string's first byte)
    free(out);
    p->i = start;
    return NULL;
}

static cJSON *parse_value(Src *p);

static void append(cJSON *parent, cJSON **last, cJSON *it) {
    if (!*last) parent->child = it;
    else { (*last)->next = it; it->prev = *last; }
    *last = it;
    parent->child->prev = it;
}

static cJSON *parse_container(Src *p, int object) {
    if (++p->depth > CJSON_NESTING_LIMIT) return NULL;
    cJSON *c = item_new(object ? cJSON_Object : cJSON_Array), *last = NULL;
    if (!c) return NULL;
    p->i++;
    skip_ws(p);
    if (at(p, object ? '}' : ']')) { p->i++; p->depth--; return c; }
    for (;;) {
        skip_ws(p);
        char *key = NULL;
        if (object) {
            if (!at(p, '"')) { p->i++; goto fail; } // (cJSON reports the byte after a key that is not a string)
            if (!(key = parse_string(p))) goto fail;
            skip_ws(p);
            if (!at(p, ':')) { free(key); goto fail; }
            p->i++;
            skip_ws(p);
        }
        cJSON *v = parse_value(p);
        if (!v) { free(key); goto fail; }
        v->string = key;
        append(c, &last, v);
        skip_ws(p);
        if (at(p, ',')) { p->i++; continue; }
        if (at(p, object ? '}' : ']')) { p->i++; break; }
        goto fail;
    }
    p->depth--;
    return c;
fail:
    cJSON_Delete(c);
    return NULL;
}

static cJSON *parse_value(Src *p) {
    skip_ws(p);
    if (p->i >= p->n) return NULL;
    const char *s = (const char *)p->s + p->i;
    size_t left = p->n - p->i;
    if (left >= 4 && !strncmp(s, "null", 4)) { p->i += 4; return item_new(cJSON_NULL); }
    if (left >= 4 && !strncmp(s, "true", 4)) {
        p->i += 4;
        cJSON *it = item_new(cJSON_True);
        if (it) it->valueint = 1;
        return it;
    }
    if (left >= 5 && !strncmp(s, "false", 5)) { p->i += 5; return item_new(cJSON_False); }
    if (*s == '"') {
        char *str = parse_string(p);
        if (!str) return NULL;
        cJSON *it = item_new(cJSON_String);
        if (!it) { free(str); return NULL; }
        it->valuestring = str;
        return it;
    }
    if (*s == '[' || *s == '{') return parse_container(p, *s == '{');
    if (*s == '-' || (*s >= '0' && *s <= '9')) {
        char num[64];
        size_t k = 0;
        while (k < left && k < sizeof(num) - 1 && strchr("0123456789+-eE.", s[k])) { num[k] = s[k]; k++; }
        num[k] = 0;
        char *end;
        double v = strtod(num, &end);
        if (end == num) return NULL;
        cJSON *it = item_new(cJSON_Number);
        if (!it) return NULL;
        it->valuedouble = v;
        it->valueint = v >= INT_MAX ? INT_MAX : v <= (double)INT_MIN ? INT_MIN : (int)v;
        p->i += (size_t)(end - num);
        return it;
    }
    return NULL;
}

static const char *last_error;

cJSON *cJSON_ParseWithLengthOpts(const char *value, size_t len, const char **end, cJSON_bool require_null_terminated) {
    last_error = NULL;
    if (!value || !len) { if (end) *end = value; last_error = value; return NULL; }
    Src p = {(const unsigned char *)value, len, 0, 0};
    // a terminating NUL inside the length is not part of the text
    if (p.s[len - 1] == 0) p.n = len - 1;
    cJSON *it = parse_value(&p);
    if (it) {
        skip_ws(&p);
        if (require_null_terminated && p.i < p.n) { cJSON_Delete(it); it = NULL; }
    }
    if (!it) last_error = value + (p.i < p.n ? p.i : p.n);
    if (end) *end = it ? value + p.i : last_error;
    return it;
}
cJSON *cJSON_ParseWithOpts(const char *value, const char **end, cJSON_bool req) {
    return value ? cJSON_ParseWithLengthOpts(value, strlen(value) + 1, end, req) : NULL;
}
cJSON *cJSON_Parse(const char *value) { return cJSON_ParseWithOpts(value, NULL, 0); }
const char *cJSON_GetErrorPtr(void) { return last_error; }

cJSON *cJSON_GetObjectItemCaseSensitive(const cJSON *const o, const char *const key) {
    if (!o || !key) return NULL;
    for (cJSON *c = o->child; c; c = c->next) if (c->string && !strcmp(c->string, key)) return c;
    return NULL;
}
cJSON *cJSON_GetArrayItem(const cJSON *a, int index) {
    cJSON *c = a && index >= 0 ? a->child : NULL;
    while (c && index-- > 0) c = c->next;
    return c;
}
int cJSON_GetArraySize(const cJSON *a) {
    int n = 0;
    for (cJSON *c = a ? a->child : NULL; c; c = c->next) n++;
    return n;
}
#define IS(name, bits) cJSON_bool cJSON_Is##name(const cJSON *const it) { return it && (it->type & 0xFF) & (bits); }
IS(False, cJSON_False)
IS(True, cJSON_True)
IS(Bool, cJSON_True | cJSON_False)
IS(Null, cJSON_NULL)
IS(Number, cJSON_Number)
IS(String, cJSON_String)
IS(Array, cJSON_Array)
IS(Object, cJSON_Object)

cJSON *cJSON_CreateObject(void) { return item_new(cJSON_Object); }
cJSON_bool cJSON_AddItemToObject(cJSON *o, const char *key, cJSON *it) {
    if (!o || !key || !it || o == it) return 0;
    char *k = dup_str(key);
    if (!k) return 0;
    free(it->string);
    it->string = k;
    cJSON *last = o->child ? o->child->prev : NULL;
    append(o, &last, it);
    return 1;
}
static cJSON *add(cJSON *o, const char *key, cJSON *it) {
    if (it && cJSON_AddItemToObject(o, key, it)) return it;
    cJSON_Delete(it);
    return NULL;
}
cJSON *cJSON_AddNullToObject(cJSON *const o, const char *const key) { return add(o, key, item_new(cJSON_NULL)); }
cJSON *cJSON_AddBoolToObject(cJSON *const o, const char *const key, const cJSON_bool b) {
    return add(o, key, item_new(b ? cJSON_True : cJSON_False));
}
cJSON *cJSON_AddNumberToObject(cJSON *const o, const char *const key, const double v) {
    cJSON *it = item_new(cJSON_Number);
    if (it) { it->valuedouble = v; it->valueint = v >= INT_MAX ? INT_MAX : v <= (double)INT_MIN ? INT_MIN : (int)v; }
    return add(o, key, it);
}
cJSON *cJSON_AddStringToObject(cJSON *const o, const char *const key, const char *const s) {
    cJSON *it = item_new(cJSON_String);
    if (it && !(it->valuestring = dup_str(s))) { free(it); it = NULL; }
    return add(o, key, it);
}

// Printing, unformatted, as cJSON prints: integers plainly, other numbers in the shortest of
// %1.15g and %1.17g that reads back the same, strings with JSON escapes.
typedef struct { char *b; size_t n, cap; int bad; } Out;
static void put(Out *o, const char *s, size_t n) {
    if (o->bad) return;
    if (o->n + n + 1 > o->cap) {
        size_t cap = (o->cap + n + 1) * 2;
        char *b = realloc(o->b, cap);
        if (!b) { o->bad = 1; return; }
        o->b = b, o->cap = cap;
    }
    memcpy(o->b + o->n, s, n);
    o->n += n;
    o->b[o->n] = 0;
}
static void put_str(Out *o, const char *s) {
    put(o, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[8];
        if (c == '"' || c == '\\') { e[0] = '\\', e[1] = (char)c; put(o, e, 2); }
        else if (c < 32) {
            const char *m = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (m) put(o, m, 2);
            else { snprintf(e, sizeof(e), "\\u%04x", c); put(o, e, 6); }
        } else put(o, (const char *)&c, 1);
    }
    put(o, "\"", 1);
}
static void put_item(Out *o, const cJSON *it) {
    char num[32];
    switch (it->type & 0xFF) {
    case cJSON_NULL: put(o, "null", 4); break;
    case cJSON_False: put(o, "false", 5); break;
    case cJSON_True: put(o, "true", 4); break;
    case cJSON_Number: {
        double d = it->valuedouble, back;
        if (d != d || d - d != 0) snprintf(num, sizeof(num), "null");
        else if (d == (double)it->valueint) snprintf(num, sizeof(num), "%d", it->valueint);
        else {
            snprintf(num, sizeof(num), "%1.15g", d);
            if (sscanf(num, "%lg", &back) != 1 || back != d) snprintf(num, sizeof(num), "%1.17g", d);
        }
        put(o, num, strlen(num));
        break;
    }
    case cJSON_String: put_str(o, it->valuestring ? it->valuestring : ""); break;
    case cJSON_Array: case cJSON_Object: {
        int obj = (it->type & 0xFF) == cJSON_Object;
        put(o, obj ? "{" : "[", 1);
        for (const cJSON *c = it->child; c; c = c->next) {
            if (obj) { put_str(o, c->string ? c->string : ""); put(o, ":", 1); }
            put_item(o, c);
            if (c->next) put(o, ",", 1);
        }
        put(o, obj ? "}" : "]", 1);
        break;
    }
    default: o->bad = 1;
    }
}
char *cJSON_PrintUnformatted(const cJSON *it) {
    Out o = {0};
    if (!it) return NULL;
    put_item(&o, it);
    if (o.bad) { free(o.b); return NULL; }
    return o.b;
}
