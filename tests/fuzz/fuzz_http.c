/*
 * fuzz_http.c - libFuzzer harness for HTTP request handling: raw bytes are fed through
 * a socket pair into the same evhttp router the services use, with routes whose
 * handlers read path parameters, the query string, headers and a JSON body. Any
 * input must be answered or dropped; never crash, hang or leak.
 */
#include <event2/event.h>
#include <event2/http.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "strand/http.h"

static void handle_echo(st_http_req_t *req, void *ctx)
{
    const char *id = st_http_param(req, "id");
    const char *limit = st_http_query(req, "limit");
    const char *auth = st_http_header(req, "Authorization");
    json_t *body = st_http_body_object(req);   /* answers 400/413 itself on failure */
    if (body == NULL)
        return;
    json_t *answer = json_pack("{s:s?, s:s?, s:b, s:i}", "id", id, "limit", limit, "auth",
                               auth != NULL, "keys", (int)json_object_size(body));
    json_decref(body);
    st_http_reply_json(req, 200, answer);
}

static void handle_get(st_http_req_t *req, void *ctx)
{
    st_http_reply_problem(req, 404, "not_found", st_http_param(req, "name"), NULL, NULL);
}

static struct event_base *base;
static st_http_server_t *server;
static struct sockaddr_in server_addr;

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopbreak(base);
}

/* The client side: drain the answer; EOF means the server is done with us. */
static void client_cb(evutil_socket_t fd, short what, void *arg)
{
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0)
        event_base_loopbreak(base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (base == NULL) {
        st_errbuf_t eb;
        base = event_base_new();
        if (st_http_server_new(base, "127.0.0.1", 0, 4096, &server, &eb) != ST_OK)
            abort();
        st_http_route(server, "POST", "/v1/things/{id}/do", handle_echo, NULL);
        st_http_route(server, "GET", "/v1/things/{name}", handle_get, NULL);
        /* A second listener whose port we can learn. */
        struct evhttp_bound_socket *bound =
            evhttp_bind_socket_with_handle(st_http_server_evhttp(server), "127.0.0.1", 0);
        socklen_t len = sizeof server_addr;
        if (bound == NULL ||
            getsockname(evhttp_bound_socket_get_fd(bound), (struct sockaddr *)&server_addr, &len) != 0)
            abort();
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&server_addr, sizeof server_addr) != 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    evutil_make_socket_nonblocking(fd);
    struct event *client = event_new(base, fd, EV_READ | EV_PERSIST, client_cb, NULL);
    struct event *timer = evtimer_new(base, timeout_cb, NULL);
    struct timeval tv = {1, 0};
    event_add(client, NULL);
    evtimer_add(timer, &tv);
    event_base_dispatch(base);
    event_free(client);
    event_free(timer);
    close(fd);
    return 0;
}
