/* Unique ids and the bootstrap roots this process hosts for them (split from comm.c):
 * braid_get_unique_id starts a root service; the communicator created from that id in this
 * process adopts it (braid_hosted_take), so destroy can wait until the service delivered its
 * last replies. A split's leader makes its id with braid_unique_id_near (its root follows the
 * parent's bootstrap, its secret is derived from the parent's: split.c), and stops the root when
 * the split fails before anyone could join. */
#include "core/comm.h"
#include "core/config.h"
#include "core/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t hosted_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct hosted_root {
    uint8_t secret[BRAID_SECRET_BYTES];
    braid_boot_root_t *root;
    struct hosted_root *next;
} hosted_root_t;
static hosted_root_t *hosted;

static void hosted_add(const uint8_t *secret, braid_boot_root_t *root)
{
    hosted_root_t *h = calloc(1, sizeof(*h));
    if (!h) return; /* the service still runs; destroy just will not wait for it */
    memcpy(h->secret, secret, BRAID_SECRET_BYTES);
    h->root = root;
    pthread_mutex_lock(&hosted_lock);
    h->next = hosted;
    hosted = h;
    pthread_mutex_unlock(&hosted_lock);
}

braid_boot_root_t *braid_hosted_take(const uint8_t *secret)
{
    braid_boot_root_t *root = NULL;
    pthread_mutex_lock(&hosted_lock);
    for (hosted_root_t **p = &hosted; *p; p = &(*p)->next)
        if (!braid_secret_cmp((*p)->secret, secret)) {
            hosted_root_t *h = *p;
            *p = h->next;
            root = h->root;
            free(h);
            break;
        }
    pthread_mutex_unlock(&hosted_lock);
    return root;
}

/* A root on a (port 0), hosted here, and its id; its secret is secret, else a random one. */
static braid_result_t new_id(braid_boot_addr_t *a, const uint8_t *secret, braid_unique_id_t *id_p)
{
    if (secret)
        memcpy(a->secret, secret, BRAID_SECRET_BYTES);
    else
        BRAID_CHECK(braid_boot_random_secret(a->secret));
    double timeout;
    BRAID_CHECK(braid_param_double("TIMEOUT", &timeout));
    braid_boot_root_t *root;
    BRAID_CHECK(braid_boot_root_start_handle(a, timeout, &root));
    hosted_add(a->secret, root);
    braid_boot_id_encode(a, id_p);
    return BRAID_SUCCESS;
}

braid_result_t braid_get_unique_id(braid_unique_id_t *id_p)
{
    braid_clear_error();
    if (!id_p) return braid_set_error(BRAID_ERR_INVALID_ARG, "id_p is NULL");
    braid_boot_addr_t a;
    memset(&a, 0, sizeof(a));
    BRAID_CHECK(braid_boot_local_addr(&a.addr, &a.addrlen));
    return new_id(&a, NULL, id_p);
}

braid_result_t braid_unique_id_near(const braid_boot_addr_t *near, const uint8_t *secret,
                                    braid_unique_id_t *id_p)
{
    braid_boot_addr_t a;
    memset(&a, 0, sizeof(a));
    BRAID_CHECK(braid_boot_listen_addr(near, &a.addr, &a.addrlen));
    return new_id(&a, secret, id_p);
}

void braid_unique_id_abandon(const braid_unique_id_t *id)
{
    braid_boot_addr_t a;
    if (braid_boot_id_decode(id, &a) != BRAID_SUCCESS) {
        braid_clear_error();
        return;
    }
    braid_boot_root_stop(braid_hosted_take(a.secret));
}

braid_result_t braid_unique_id_from_root(const char *root, braid_unique_id_t *id_p)
{
    braid_clear_error();
    if (!root) return braid_set_error(BRAID_ERR_INVALID_ARG, "root is NULL");
    if (!id_p) return braid_set_error(BRAID_ERR_INVALID_ARG, "id_p is NULL");
    braid_boot_addr_t a;
    BRAID_CHECK(braid_boot_fixed_root(root, &a));
    braid_boot_id_encode(&a, id_p);
    return BRAID_SUCCESS;
}
