/* http_tls.c - the TLS context of an HTTPS listener (see http_int.h, http.h). */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>

#include "http_int.h"

/* The first queued OpenSSL error as text, then clears the queue. */
static const char *ssl_error(char *buf, size_t len)
{
    unsigned long code = ERR_get_error();
    if (code == 0)
        snprintf(buf, len, "unknown error");
    else
        ERR_error_string_n(code, buf, len);
    ERR_clear_error();
    return buf;
}

st_err_t st_tls_ctx_load(const char *cert_file, const char *key_file, SSL_CTX **out,
                         st_errbuf_t *eb)
{
    char why[256];
    *out = NULL;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not create a TLS context: %s",
                          ssl_error(why, sizeof why));
    st_err_t err = ST_OK;
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
        err = st_err_set(eb, ST_ERR_CONFIG, "could not require TLS 1.2: %s", ssl_error(why, sizeof why));
    else if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1)
        err = st_err_set(eb, ST_ERR_CONFIG, "STRAND_HTTP_TLS_CERT_FILE %s: %s", cert_file,
                         ssl_error(why, sizeof why));
    else if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1)
        err = st_err_set(eb, ST_ERR_CONFIG, "STRAND_HTTP_TLS_KEY_FILE %s: %s", key_file,
                         ssl_error(why, sizeof why));
    else if (SSL_CTX_check_private_key(ctx) != 1)
        err = st_err_set(eb, ST_ERR_CONFIG, "STRAND_HTTP_TLS_KEY_FILE %s does not match the "
                         "certificate: %s", key_file, ssl_error(why, sizeof why));
    if (err != ST_OK) {
        SSL_CTX_free(ctx);
        return err;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
    *out = ctx;
    return ST_OK;
}
