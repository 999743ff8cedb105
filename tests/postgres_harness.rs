//! The tests' PostgreSQL (tests/support/postgres.rs) runs for real, and the
//! PostgreSQL schema (migrations/postgres/) is SQLite's (migrations/): the
//! same tables, columns, types, defaults, keys, indexes and triggers.
//!
//! Never skipped: without PostgreSQL's binaries these fail, saying what to
//! install.

#[path = "support/postgres.rs"]
mod postgres;

use std::collections::BTreeSet;

use sqlx::{Connection, PgConnection, PgPool, Row, SqliteConnection};

#[tokio::test]
async fn each_fresh_database_is_a_database_of_its_own() {
    let server = postgres::server();
    let (a, b) = (server.fresh_database(), server.fresh_database());
    assert_ne!(a, b);
    let (a, b) = (PgPool::connect(&a).await.unwrap(), PgPool::connect(&b).await.unwrap());
    let name = |pool: PgPool| async move {
        sqlx::query_scalar::<_, String>("SELECT current_database()::text").fetch_one(&pool).await.unwrap()
    };
    assert_ne!(name(a.clone()).await, name(b.clone()).await);

    sqlx::query("CREATE TABLE only_in_a (x BIGINT)").execute(&a).await.unwrap();
    sqlx::query("INSERT INTO only_in_a VALUES ($1)").bind(7_i64).execute(&a).await.unwrap();
    let in_a: i64 = sqlx::query_scalar("SELECT x FROM only_in_a").fetch_one(&a).await.unwrap();
    assert_eq!(in_a, 7);
    let in_b: Option<String> = sqlx::query_scalar("SELECT to_regclass('only_in_a')::text").fetch_one(&b).await.unwrap();
    assert_eq!(in_b, None, "a table made in one fresh database shows in another");
}

#[tokio::test]
async fn the_server_listens_on_its_unix_socket_only() {
    let server = postgres::server();
    assert!(server.socket_dir().join(".s.PGSQL.5432").exists());
    let mut conn = PgConnection::connect(&server.fresh_database()).await.unwrap();
    let listen: String = sqlx::query_scalar("SHOW listen_addresses").fetch_one(&mut conn).await.unwrap();
    assert_eq!(listen, "", "the tests' server must not listen on TCP");
}

/// Everything the comparison looks at, one line each, so a difference names
/// exactly what differs.
#[tokio::test]
async fn the_postgres_schema_is_the_sqlite_schema() {
    let sqlite = sqlite_schema().await;
    let postgres = postgres_schema().await;
    assert!(sqlite.iter().any(|line| line.starts_with("column groups.name ")), "no SQLite schema read: {sqlite:?}");
    let only_sqlite: Vec<_> = sqlite.difference(&postgres).collect();
    let only_postgres: Vec<_> = postgres.difference(&sqlite).collect();
    assert!(
        only_sqlite.is_empty() && only_postgres.is_empty(),
        "migrations/postgres/ and migrations/ differ.\nonly in SQLite:\n  {}\nonly in PostgreSQL:\n  {}",
        join(&only_sqlite),
        join(&only_postgres)
    );
}

fn join(lines: &[&String]) -> String {
    lines.iter().map(|line| line.as_str()).collect::<Vec<_>>().join("\n  ")
}

/// The schema a fresh SQLite store has after `migrations/`.
async fn sqlite_schema() -> BTreeSet<String> {
    let mut db = SqliteConnection::connect("sqlite::memory:").await.unwrap();
    sqlx::migrate!("./migrations").run(&mut db).await.unwrap();
    let mut schema = BTreeSet::new();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations'",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    for table in &tables {
        let columns = "SELECT cid, name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1) ORDER BY cid";
        for row in sqlx::query(columns).bind(table).fetch_all(&mut db).await.unwrap() {
            let (cid, name, kind): (i64, String, String) = (row.get(0), row.get(1), row.get(2));
            let not_null = row.get::<i64, _>(3) != 0 || row.get::<i64, _>(5) != 0;
            let default = row.get::<Option<String>, _>(4);
            schema.insert(column_line(table, cid, &name, sqlite_type(&kind), not_null, default.as_deref()));
            if row.get::<i64, _>(5) != 0 {
                schema.insert(format!("primary key {table}.{name} at {}", row.get::<i64, _>(5)));
            }
        }
        let indexes = "SELECT name, \"unique\", partial FROM pragma_index_list(?1) WHERE origin = 'c'";
        for row in sqlx::query(indexes).bind(table).fetch_all(&mut db).await.unwrap() {
            let (name, unique, partial): (String, i64, i64) = (row.get(0), row.get(1), row.get(2));
            schema.insert(index_line(table, &name, unique != 0, partial != 0));
        }
        let keys = "SELECT \"from\", \"table\", \"to\", on_delete FROM pragma_foreign_key_list(?1)";
        for row in sqlx::query(keys).bind(table).fetch_all(&mut db).await.unwrap() {
            let (from, to_table, to, on_delete): (String, String, String, String) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            schema.insert(format!("foreign key {table}.{from} -> {to_table}.{to} on delete {on_delete}"));
        }
        schema.insert(format!("table {table}"));
    }
    let triggers = "SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'";
    for row in sqlx::query(triggers).fetch_all(&mut db).await.unwrap() {
        schema.insert(format!("trigger {} on {}", row.get::<String, _>(0), row.get::<String, _>(1)));
    }
    schema
}

/// The schema a fresh PostgreSQL store has after `migrations/postgres/`.
/// Without the cluster's tables (`nodes`, `leases`, `transcript_chunks`, `group_folders`, `approvals`,
/// `pending_commands`, `group_activity`, `seen_commands`): only PostgreSQL has them
/// (migrations/postgres/0002_cluster.sql, 0003_transcripts.sql, 0004_folders.sql, 0007_approvals.sql,
/// 0008_commands.sql, 0009_activity.sql, 0010_seen_commands.sql).
async fn postgres_schema() -> BTreeSet<String> {
    let mut db = PgConnection::connect(&postgres::server().fresh_database()).await.unwrap();
    sqlx::migrate!("./migrations/postgres").run(&mut db).await.unwrap();
    let mut schema = BTreeSet::new();
    let columns = "SELECT table_name::text, ordinal_position::bigint - 1, column_name::text, data_type::text,
                          is_nullable::text = 'NO', column_default::text
                     FROM information_schema.columns
                    WHERE table_schema = 'public' AND table_name NOT IN ('_sqlx_migrations', 'nodes', 'leases', 'transcript_chunks', 'group_folders', 'approvals', 'pending_commands', 'group_activity', 'seen_commands')";
    for row in sqlx::query(columns).fetch_all(&mut db).await.unwrap() {
        let (table, cid, name, kind): (String, i64, String, String) = (row.get(0), row.get(1), row.get(2), row.get(3));
        let default = row.get::<Option<String>, _>(5);
        // A default carries its cast (`'queued'::text`); SQLite's has none.
        let default = default.as_deref().map(|text| text.split("::").next().unwrap_or(text));
        schema.insert(column_line(&table, cid, &name, &kind, row.get(4), default));
        schema.insert(format!("table {table}"));
    }
    let keys = "SELECT c.conrelid::regclass::text, a.attname::text, k.n
                  FROM pg_constraint c, unnest(c.conkey) WITH ORDINALITY AS k(attnum, n), pg_attribute a
                 WHERE c.contype = 'p' AND a.attrelid = c.conrelid AND a.attnum = k.attnum
                   AND c.connamespace = 'public'::regnamespace AND c.conrelid <> '_sqlx_migrations'::regclass
                   AND c.conrelid::regclass::text NOT IN ('nodes', 'leases', 'transcript_chunks', 'group_folders', 'approvals', 'pending_commands', 'group_activity', 'seen_commands')";
    for row in sqlx::query(keys).fetch_all(&mut db).await.unwrap() {
        let (table, name, at): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
        schema.insert(format!("primary key {table}.{name} at {at}"));
    }
    schema.extend(postgres_indexes_keys_triggers(&mut db).await);
    schema
}

async fn postgres_indexes_keys_triggers(db: &mut PgConnection) -> BTreeSet<String> {
    let mut schema = BTreeSet::new();
    // Those a constraint (a primary key) made are left out, as SQLite's own are.
    let indexes = "SELECT t.relname::text, i.relname::text, x.indisunique, x.indpred IS NOT NULL
                     FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
                    WHERE t.relnamespace = 'public'::regnamespace AND t.relname NOT IN ('nodes', 'leases', 'transcript_chunks', 'group_folders', 'approvals', 'pending_commands', 'group_activity', 'seen_commands')
                      AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                                       WHERE c.conindid = x.indexrelid AND c.conrelid = x.indrelid)";
    for row in sqlx::query(indexes).fetch_all(&mut *db).await.unwrap() {
        let (table, name): (String, String) = (row.get(0), row.get(1));
        schema.insert(index_line(&table, &name, row.get(2), row.get(3)));
    }
    let keys = "SELECT c.conrelid::regclass::text, a.attname::text, c.confrelid::regclass::text, f.attname::text,
                       CASE c.confdeltype WHEN 'a' THEN 'NO ACTION' WHEN 'r' THEN 'RESTRICT' WHEN 'c' THEN 'CASCADE'
                                          WHEN 'n' THEN 'SET NULL' ELSE 'SET DEFAULT' END
                  FROM pg_constraint c
                  JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
                  JOIN pg_attribute f ON f.attrelid = c.confrelid AND f.attnum = c.confkey[1]
                 WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace";
    for row in sqlx::query(keys).fetch_all(&mut *db).await.unwrap() {
        let (table, from, to_table, to, on_delete): (String, String, String, String, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
        schema.insert(format!("foreign key {table}.{from} -> {to_table}.{to} on delete {on_delete}"));
    }
    // The cluster's wake-up hints (0005_hints.sql) have no SQLite twin.
    let triggers = "SELECT tgname::text, tgrelid::regclass::text FROM pg_trigger
                     WHERE NOT tgisinternal AND tgname NOT LIKE 'pincer_hint_%'";
    for row in sqlx::query(triggers).fetch_all(&mut *db).await.unwrap() {
        schema.insert(format!("trigger {} on {}", row.get::<String, _>(0), row.get::<String, _>(1)));
    }
    schema
}

/// SQLite's declared type as the PostgreSQL type it maps to.
fn sqlite_type(declared: &str) -> &'static str {
    match declared.to_ascii_uppercase().as_str() {
        "INTEGER" => "bigint",
        "REAL" => "double precision",
        "TEXT" => "text",
        "BLOB" => "bytea",
        other => panic!("SQLite type {other} has no PostgreSQL mapping here: add one, in both schemas"),
    }
}

fn column_line(table: &str, cid: i64, name: &str, kind: &str, not_null: bool, default: Option<&str>) -> String {
    let null = if not_null { "not null" } else { "null" };
    format!("column {table}.{name} #{cid} {kind} {null} default {}", default.unwrap_or("none"))
}

fn index_line(table: &str, name: &str, unique: bool, partial: bool) -> String {
    let unique = if unique { "unique " } else { "" };
    let partial = if partial { " (partial)" } else { "" };
    format!("{unique}index {name} on {table}{partial}")
}
