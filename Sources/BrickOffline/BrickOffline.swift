// The module offline users import: the queue, the manager and the store protocol
// (`BrickOfflineCore`), with the stores and the response cache on SQLite (`BrickOfflineSQLite`,
// which builds GRDB). A PostgreSQL worker imports `BrickOfflinePostgres` instead, which re-exports
// `BrickOfflineCore` without SQLite.
@_exported import BrickOfflineCore
@_exported import BrickOfflineSQLite
