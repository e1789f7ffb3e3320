//! `sqlx::migrate!` embeds the migration files at compile time; without this, editing or adding a
//! migration would not rebuild the crate and a stale set would be embedded.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
