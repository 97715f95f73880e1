from ragvps.cli import main

main()
