/* The device's asynchronous events (ibv_get_async_event): a port that went down or a device
 * that failed is every link's failure, with that reason, rather than the retries-exceeded
 * completion that would follow it a retry timeout later (or, on an idle link, at the next
 * keepalive). The context's event descriptor is non-blocking, and links' polls read it at
 * most every VERBS_ASYNC_CHECK_MS, so the data path pays a clock read per poll. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>

#include "core.h"
#include "deadline.h"
#include "log.h"
#include "verbs.h"

int weftVerbsEventsInit(struct verbsState *s) {
  int flags = fcntl(s->ctx->async_fd, F_GETFL);
  if (flags < 0 || fcntl(s->ctx->async_fd, F_SETFL, flags | O_NONBLOCK) < 0) return errno;
  return 0;
}

static void noteEvent(struct verbsState *s, const struct ibv_async_event *e) {
  const char *what = ibv_event_type_str(e->event_type);
  switch (e->event_type) {
    case IBV_EVENT_PORT_ERR:
      if (e->element.port_num != s->port) return;
      snprintf(s->deviceError, sizeof s->deviceError, "port %d of %s went down (%s)", s->port,
               s->dev, what);
      break;
    case IBV_EVENT_DEVICE_FATAL:
      snprintf(s->deviceError, sizeof s->deviceError, "%s failed (%s)", s->dev, what);
      break;
    default:
      /* A QP or CQ in error shows as its link's failed completions. */
      INFO(WEFT_INIT, "verbs: rank %d: %s: %s", s->rank, s->dev, what);
      return;
  }
  WARN("verbs: rank %d: %s: every link of this communicator fails", s->rank, s->deviceError);
}

void weftVerbsWatchEvents(struct verbsState *s) {
  int64_t now = weftNowMs();
  if (s->deviceError[0] != '\0' || now < s->eventsDueMs) return;
  s->eventsDueMs = now + VERBS_ASYNC_CHECK_MS;
  struct ibv_async_event e;
  while (ibv_get_async_event(s->ctx, &e) == 0) {
    noteEvent(s, &e);
    ibv_ack_async_event(&e);
  }
}
