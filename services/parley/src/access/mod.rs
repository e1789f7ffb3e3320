pub mod peers_file;
