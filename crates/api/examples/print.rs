fn main() { print!("{}", sample_operator_api::crds_yaml().unwrap()); }
