fn main() {
    let greeting = "hello";
    println!("{greeting}, world");
}
