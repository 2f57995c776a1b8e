/* tracker/trk_map.c -- intrusive lists and a string-keyed hash map (open addressing, linear
** probing, tombstones); keys are borrowed from the values they map to. */
#include <string.h>

#include "tracker/trk_int.h"

void trk__list_init(trk_link *head)
{
    head->prev = head->next = head;
}

void trk__list_push_back(trk_link *head, trk_link *l)
{
    l->prev = head->prev;
    l->next = head;
    head->prev->next = l;
    head->prev = l;
}

void trk__list_push_front(trk_link *head, trk_link *l)
{
    l->next = head->next;
    l->prev = head;
    head->next->prev = l;
    head->next = l;
}

void trk__list_remove(trk_link *l)
{
    if (l->next == NULL) return;
    l->prev->next = l->next;
    l->next->prev = l->prev;
    l->prev = l->next = NULL;
}

int trk__list_empty(const trk_link *head)
{
    return head->next == head;
}

static const char TOMB[] = "";
#define TRK_TOMB TOMB

void trk__map_init(trk_map *m)
{
    memset(m, 0, sizeof *m);
}

void trk__map_fini(trk_map *m)
{
    at_free(m->keys);
    at_free(m->vals);
    memset(m, 0, sizeof *m);
}

static size_t slot_of(const trk_map *m, const char *key)
{
    return (size_t)at_hash64(key, strlen(key)) & (m->cap - 1);
}

void *trk__map_get(const trk_map *m, const char *key)
{
    if (m->cap == 0) return NULL;
    for (size_t i = slot_of(m, key), k = 0; k < m->cap; i = (i + 1) & (m->cap - 1), k++) {
        if (m->keys[i] == NULL) return NULL;
        if (m->keys[i] != TRK_TOMB && strcmp(m->keys[i], key) == 0) return m->vals[i];
    }
    return NULL;
}

static at_err grow(trk_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    trk_map n;
    if (m->n * 2 < m->cap) cap = m->cap; /* mostly tombstones: rehash at the same size */
    n.keys = at_calloc(cap, sizeof *n.keys);
    n.vals = at_calloc(cap, sizeof *n.vals);
    if (n.keys == NULL || n.vals == NULL) {
        at_free(n.keys);
        at_free(n.vals);
        return AT_ENOMEM;
    }
    n.cap = cap;
    n.n = n.n_used = 0;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] != NULL && m->keys[i] != TRK_TOMB) {
            size_t j = slot_of(&n, m->keys[i]);
            while (n.keys[j] != NULL)
                j = (j + 1) & (n.cap - 1);
            n.keys[j] = m->keys[i];
            n.vals[j] = m->vals[i];
            n.n++;
            n.n_used++;
        }
    }
    at_free(m->keys);
    at_free(m->vals);
    *m = n;
    return AT_OK;
}

at_err trk__map_put(trk_map *m, const char *key, void *val)
{
    size_t i, tomb = (size_t)-1;
    if ((m->n_used + 1) * 4 >= m->cap * 3 && grow(m) != AT_OK) return AT_ENOMEM;
    for (i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == NULL) break;
        if (m->keys[i] == TRK_TOMB) {
            if (tomb == (size_t)-1) tomb = i;
        } else if (strcmp(m->keys[i], key) == 0) {
            m->keys[i] = key;
            m->vals[i] = val;
            return AT_OK;
        }
    }
    if (tomb != (size_t)-1)
        i = tomb;
    else
        m->n_used++;
    m->keys[i] = key;
    m->vals[i] = val;
    m->n++;
    return AT_OK;
}

void trk__map_del(trk_map *m, const char *key)
{
    if (m->cap == 0) return;
    for (size_t i = slot_of(m, key), k = 0; k < m->cap; i = (i + 1) & (m->cap - 1), k++) {
        if (m->keys[i] == NULL) return;
        if (m->keys[i] != TRK_TOMB && strcmp(m->keys[i], key) == 0) {
            m->keys[i] = TRK_TOMB;
            m->vals[i] = NULL;
            m->n--;
            return;
        }
    }
}

void *trk__map_next(const trk_map *m, size_t *i)
{
    for (; *i < m->cap; (*i)++)
        if (m->keys[*i] != NULL && m->keys[*i] != TRK_TOMB) return m->vals[(*i)++];
    return NULL;
}
