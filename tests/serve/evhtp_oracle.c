/* The differential tests' oracle: an HTTP server on libevhtp (Debian's libevhtp 1.2.18, whose parser.c is the one
 * tritonserver 2.51 links: triton-inference-server/third_party r24.10 changes only evhtp.c's body buffering and
 * tracing). Each request it frames is written to stdout as one JSON line, every byte string hex-encoded as evhtp
 * holds it: the method, path->full (what Triton routes on), query_raw (a form-urlencoded body lands here),
 * what evhtp_kv_find(headers, "content-type") finds (the lookup that decides the form parsing), each header's key and
 * value by their stored lengths, and the body. It answers 200 with an empty body.
 *
 * usage: evhtp_oracle ADDRESS PORT   (ADDRESS as evhtp_bind_socket takes it: 127.0.0.1, or unix:/path) */
#include <evhtp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void hex(const void *data, size_t n) {
    const unsigned char *p = data;
    putchar('"');
    for (size_t i = 0; i < n; i++)
        printf("%02x", p[i]);
    putchar('"');
}

static void hex_or_null(const void *s) {
    if (s)
        hex(s, strlen(s));
    else
        printf("null");
}

static void on_request(evhtp_request_t *req, void *arg) {
    size_t n = evbuffer_get_length(req->buffer_in);
    const unsigned char *body = evbuffer_pullup(req->buffer_in, n);
    evhtp_kv_t *kv;
    int first = 1;

    (void)arg;
    printf("{\"method\":\"%s\",\"path\":", htparser_get_methodstr_m(req->method));
    hex_or_null(req->uri->path->full);
    printf(",\"query\":");
    hex_or_null(req->uri->query_raw);
    printf(",\"content_type\":");
    hex_or_null(evhtp_kv_find(req->headers_in, "content-type"));
    printf(",\"headers\":[");
    TAILQ_FOREACH(kv, req->headers_in, next) {
        printf(first ? "[" : ",[");
        hex(kv->key, kv->klen);
        putchar(',');
        hex(kv->val, kv->vlen);
        putchar(']');
        first = 0;
    }
    printf("],\"body\":");
    hex(body, n);
    printf("}\n");
    fflush(stdout);
    evhtp_send_reply(req, EVHTP_RES_OK);
}

int main(int argc, char **argv) {
    struct event_base *base = event_base_new();
    evhtp_t *htp = evhtp_new(base, NULL);

    if (argc != 3)
        return 2;
    evhtp_set_gencb(htp, on_request, NULL);
    if (evhtp_bind_socket(htp, argv[1], (uint16_t)atoi(argv[2]), 128) != 0) {
        perror("evhtp_bind_socket");
        return 1;
    }
    printf("listening\n");
    fflush(stdout);
    return event_base_loop(base, 0);
}
