//! `/help`'s answers, one per platform, as fixed texts: a `/help` then
//! travels to its group's owner by name (`command`), like a usage. Touches
//! nothing.

/// Telegram's: exactly what its command list (`telegram::commands::Cmd`)
/// describes, which a test there checks.
pub const TELEGRAM: &str = "pincer runs a Claude Code agent for this chat:\n\n\
/status — is the agent's session live, what runs in it, what it cost\n\
/stop — interrupt the agent's current turn\n\
/new — start a fresh session (the old one stays in pincer's history)\n\
/tasks — this group's scheduled tasks; admins: /tasks run|pause|resume ID\n\
/budget — what this group spent; admins: /budget daily|monthly USD, /budget turns N\n\
/chatid — show this chat's id (and topic), to register it with pincer\n\
/help — what the commands do";

/// WhatsApp's: it has no command menu, so it also says how to answer an approval.
pub const WHATSAPP: &str = "pincer runs a Claude Code agent for this group. Commands:\n\
/status: is the agent's session live, what runs in it, what it cost\n\
/stop: interrupt the agent's current turn\n\
/new: start a fresh session (the old one stays in pincer's history)\n\
/tasks: this group's scheduled tasks (admins: /tasks run|pause|resume ID)\n\
/budget: what this group spent (admins: /budget daily|monthly USD, /budget turns N)\n\
/chatid: this group's id, to register it with pincer\n\
/help: this text\n\
When the agent asks to use a tool, an admin answers: allow CODE, deny CODE or always CODE \
(or replies to the request with allow, deny or always).";
