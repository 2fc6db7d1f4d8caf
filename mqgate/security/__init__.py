"""mqgate security: user repositories, authentication, access control, audit (S4)."""
