//! Storage adapters behind the vocabulary's ports: attachment stores
//! (`AttachmentStore`) and secret stores (`SecretStore`).

pub mod attachments;
pub mod secrets;
