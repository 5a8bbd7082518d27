//! A WASI command component (`wasi:cli/command`): a valid component that is
//! not a Reson plugin, for the loader's wrong-world tests.

fn main() {
    println!("hello");
}
