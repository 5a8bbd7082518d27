//! Rebuilds the crate when a schema migration is added: `sqlx::migrate!`
//! embeds `migrations/` but tracks only the files it saw last time.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
