#!/usr/bin/env bash
# A private PostgreSQL server for trying BrickOfflinePostgres and for its tests: a cluster of its own
# in DIR (initdb), run by an unprivileged user, listening on 127.0.0.1 only, on a free port (on
# $PGPORT when it is set and no PID is given: a server to try things against on a port you chose;
# the test fixture, which passes its PID, always gets a free port).
#
#   Scripts/private-postgres.sh start DIR     # prints `export PG…=…` lines: eval "$(… start DIR)"
#   Scripts/private-postgres.sh start DIR PID # …and stops it and removes DIR once process PID ends
#                                             # (what the test fixture does: nothing outlives a run)
#   Scripts/private-postgres.sh restart DIR   # pg_ctl restart (same port)
#   Scripts/private-postgres.sh stop DIR      # stops it and removes DIR
#
# Needs Debian's `postgresql` package (initdb, pg_ctl). As root, the server runs as `postgres`.
# The role `brick` (password in DIR/password) owns the database `brick`; nothing else can log in.
set -euo pipefail

command=${1:-}
dir=${2:-}
if [ -z "$command" ] || [ -z "$dir" ]; then
    echo "usage: $0 start|restart|stop DIR" >&2
    exit 64
fi

bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "private-postgres: initdb not found (install Debian's postgresql package, or set PG_BIN)" >&2
    exit 69
fi

# PostgreSQL refuses to run as root: run it as the `postgres` user then.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# The start time (clock ticks since boot, /proc/PID/stat field 22) of process PID; empty when none.
owner_start_time() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    set -- ${stat##*) }
    echo "${20}"
}

# Whether process PID (started at START) is still running: not gone, not a zombie, not another
# process given the same PID since.
owner_alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    set -- $2 ${stat##*) }
    [ "$2" != Z ] && [ "$2" != X ] && [ "${21}" = "$1" ]
}

case "$command" in
start)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
    if [ -n "${PGPORT:-}" ] && [ -z "${3:-}" ]; then
        port=$PGPORT
    else
        port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    fi
    # A second start on a DIR that holds a cluster would write a new password file the role does
    # not have (every later login failed) and then fail in initdb without a word.
    if [ -e "$dir/data" ]; then
        echo "private-postgres: $dir already holds a cluster; its password is in $dir/password," \
            "its port in $dir/port (to start afresh: $0 stop $dir)" >&2
        exit 1
    fi
    password=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    umask 077
    printf '%s\n' "$password" >"$dir/password"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir/password"
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        --pwfile="$dir/password" -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 300
shared_buffers = 128MB
log_min_messages = warning
CONF
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null \
        || { cat "$dir/server.log" >&2; exit 1; }
    as_owner "$bin/psql" -h "$dir" -p "$port" -U postgres -d postgres -q -v ON_ERROR_STOP=1 \
        -c "CREATE ROLE brick LOGIN PASSWORD '$password'" -c "CREATE DATABASE brick OWNER brick" >/dev/null
    echo "$port" >"$dir/port"
    owner=${3:-}
    if [ -n "$owner" ]; then
        # A watchdog, detached: when the owner ends (however it ends), the server goes with it.
        # "Ended" is read from /proc, not from `kill -0`: a killed owner its parent has not reaped
        # yet (a zombie) still answers `kill -0`, and so would a new process given its PID later;
        # the owner is the process with that PID *and* the start time it had now, not a zombie.
        since=$(owner_start_time "$owner")
        [ -n "$since" ] || { "$0" stop "$dir"; echo "private-postgres: no process $owner" >&2; exit 1; }
        nohup setsid bash -c "$(declare -f owner_start_time owner_alive)
            while owner_alive $owner $since; do sleep 1; done; '$0' stop '$dir'" \
            >/dev/null 2>&1 </dev/null &
    fi
    echo "export PGHOST=127.0.0.1 PGPORT=$port PGUSER=brick PGPASSWORD=$password PGDATABASE=brick"
    ;;
restart)
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -m fast restart >/dev/null
    ;;
stop)
    if [ -d "$dir/data" ]; then
        as_owner "$bin/pg_ctl" -D "$dir/data" -w -t 60 -m fast stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start|restart|stop DIR" >&2
    exit 64
    ;;
esac
