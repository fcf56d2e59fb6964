#ifndef CNETLINK_SHIM_H
#define CNETLINK_SHIM_H

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/if.h>
#include <sys/socket.h>
#include <stdint.h>

/* netlink's message and attribute walkers are macros, which Swift cannot import. */

static inline int cnetlink_nlmsg_ok(const struct nlmsghdr *header, int length) {
    return NLMSG_OK(header, length);
}
static inline struct nlmsghdr *cnetlink_nlmsg_next(struct nlmsghdr *header, int *length) {
    return NLMSG_NEXT(header, *length);
}
static inline void *cnetlink_nlmsg_data(struct nlmsghdr *header) { return NLMSG_DATA(header); }
static inline int cnetlink_nlmsg_length(int payload) { return NLMSG_LENGTH(payload); }
static inline int cnetlink_nlmsg_align(int length) { return NLMSG_ALIGN(length); }

static inline int cnetlink_rta_length(int payload) { return RTA_LENGTH(payload); }
static inline int cnetlink_rta_space(int payload) { return RTA_SPACE(payload); }

/* Flags of a dump request (NLM_F_DUMP is a compound macro). */
static inline int cnetlink_dump_flags(void) { return NLM_F_REQUEST | NLM_F_DUMP; }

/* Multicast groups, as one mask (RTMGRP_* are plain constants, combined here for clarity). */
static inline unsigned int cnetlink_route_groups(void) {
    return RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE;
}

#endif
