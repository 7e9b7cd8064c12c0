"""One phase's agent under watch: started, watched, ended."""
